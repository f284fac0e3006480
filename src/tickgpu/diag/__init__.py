"""tickgpu.diag"""
