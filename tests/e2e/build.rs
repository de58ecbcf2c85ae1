//! How the binary is built: never with ggml's AMX kernels, which crash on the first prompt on
//! the CPUs that have AMX (SIGSEGV in `ggml_backend_amx_mul_mat`). The check reads the binary
//! itself, so it holds on any build machine: where the kernels are compiled in (a build for a
//! CPU with AMX, or one that asked for them), their source file's name is in the binary through
//! ggml's assertions; without them the file compiles to nothing.

/// Strings that only the AMX kernels put into a binary.
pub const AMX_MARKERS: [&str; 3] = [
    "ggml-cpu/amx/mmq.cpp",
    "ggml-cpu/amx/amx.cpp",
    "amx repack tensor",
];

pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// (A `dynamic-backends` build holds no CPU backend: tests/e2e/backends.rs reads its modules.)
#[cfg(not(feature = "dynamic-backends"))]
#[test]
fn the_binary_holds_no_amx_kernels() {
    let path = env!("CARGO_BIN_EXE_agent-as-model");
    let binary = std::fs::read(path).expect("read the binary");
    // The check can see llama.cpp in the binary at all: its CPU backend's own source name.
    assert!(
        contains(&binary, b"ggml-cpu.c"),
        "llama.cpp's CPU backend is not in {path}: the check would prove nothing"
    );
    for marker in AMX_MARKERS {
        assert!(
            !contains(&binary, marker.as_bytes()),
            "{path} holds ggml's AMX kernels ({marker:?}): build llama.cpp with \
             -mno-amx-tile -mno-amx-int8 -mno-amx-bf16 (.cargo/config.toml)"
        );
    }
}
