"""tickgpu.runtime"""
