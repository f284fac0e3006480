"""tickgpu.quant"""
