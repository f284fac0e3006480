"""tickgpu.kernels"""
