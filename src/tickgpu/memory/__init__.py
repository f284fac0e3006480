"""tickgpu.memory"""
