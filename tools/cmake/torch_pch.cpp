// The source of ca_torch_pch, the target that owns the precompiled torch/torch.h (see the
// top-level CMakeLists.txt); it compiles nothing of its own.
