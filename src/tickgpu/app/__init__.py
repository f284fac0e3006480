"""tickgpu.app"""
