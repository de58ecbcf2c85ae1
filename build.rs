//! With the `dynamic-backends` feature, llama.cpp's backends are modules loaded at run time:
//! its CPU backend in one build per x86-64 level (SSE4.2 to AVX-512 with VNNI and BF16), of
//! which ggml loads the best this CPU runs, and a GPU backend (Vulkan, CUDA) only where its
//! driver is installed. The modules and llama.cpp's shared libraries are copied beside the
//! binary (where it looks for them, `$ORIGIN` on Linux), except the Sapphire Rapids build:
//! ggml's AMX kernels crash on the first prompt (llama.cpp issue 20824), so none ships.
use std::path::{Path, PathBuf};

/// The CPU build that holds ggml's AMX kernels.
const NEVER: &str = "sapphirerapids";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_DYNAMIC_BACKENDS").is_none() {
        return Ok(());
    }
    println!("cargo:rerun-if-env-changed=DEP_LLAMA_BACKENDS_DIR");
    let modules = std::env::var_os("DEP_LLAMA_BACKENDS_DIR")
        .map(PathBuf::from)
        .ok_or("llama-cpp-sys-2 did not say where its backends are (DEP_LLAMA_BACKENDS_DIR)")?;
    // OUT_DIR is target/<profile>/build/<package>-<hash>/out: the binary goes to
    // target/<profile>, and the tests run it from there.
    let out = PathBuf::from(std::env::var_os("OUT_DIR").ok_or("no OUT_DIR")?);
    let beside = out
        .ancestors()
        .nth(3)
        .ok_or("OUT_DIR is not under a target folder")?;
    // The modules, and llama.cpp's shared libraries under the names the binary asks for
    // (`libllama.so.0`).
    let mut shipped = Vec::new();
    for entry in std::fs::read_dir(&modules)? {
        let path = entry?.path();
        if is_module(&path) {
            shipped.push(path);
        }
    }
    let libraries = modules
        .parent()
        .map(|out| out.join("lib"))
        .ok_or("llama-cpp-sys-2's backends are not in its build folder")?;
    if libraries.is_dir() {
        for entry in std::fs::read_dir(&libraries)? {
            let path = entry?.path();
            if path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(is_versioned_library)
            {
                shipped.push(path);
            }
        }
    }
    // Beside the binary, and beside the tests and benchmarks (in deps/), which load them too;
    // in examples/ as well, where llama-cpp-sys-2 links the unversioned names to these (a link
    // left dangling there fails its next build with other features).
    let examples = beside.join("examples");
    let mut folders = vec![beside.to_path_buf(), beside.join("deps")];
    if examples.is_dir() {
        folders.push(examples);
    }
    for folder in folders {
        for path in &shipped {
            let to = folder.join(path.file_name().ok_or("a library has no name")?);
            // Replaced, not hard-linked: a build with other features has its own.
            let _ = std::fs::remove_file(&to);
            std::fs::copy(path, &to)?;
        }
        let unwanted = folder.join(format!("libggml-cpu-{NEVER}.so"));
        if unwanted.exists() {
            std::fs::remove_file(unwanted)?;
        }
    }
    match std::env::var("CARGO_CFG_TARGET_OS").as_deref() {
        Ok("linux") => println!("cargo:rustc-link-arg=-Wl,-rpath,$ORIGIN"),
        Ok("macos") => println!("cargo:rustc-link-arg=-Wl,-rpath,@executable_path"),
        _ => {}
    }
    Ok(())
}

/// A backend module that ships: `libggml-cpu-haswell.so`, `ggml-vulkan.dll`, …
fn is_module(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    let library = [".so", ".dll", ".dylib"].iter().any(|e| name.ends_with(e));
    library && name.contains("ggml-") && !name.contains(NEVER)
}

/// A shared library under its ABI name: `libllama.so.0`, `libggml.0.dylib`.
fn is_versioned_library(name: &str) -> bool {
    let numbered =
        |version: &str| !version.is_empty() && version.bytes().all(|b| b.is_ascii_digit());
    name.starts_with("lib")
        && (name.rsplit_once(".so.").is_some_and(|(_, v)| numbered(v))
            || name
                .strip_suffix(".dylib")
                .and_then(|stem| stem.rsplit_once('.'))
                .is_some_and(|(_, v)| numbered(v)))
}
