"""The `machine` floor: this computer and its llama.cpp: GPUs (NVML), RAM, the llama.cpp build and its backends,
the CUDA runtime download, load settings, tune and doctor."""
