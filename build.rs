//! With the `dynamic-backends` feature, llama.cpp's backends are modules loaded at run time:
//! its CPU backend in one build per x86-64 level (SSE4.2 to AVX-512 with VNNI and BF16), of
//! which ggml loads the best this CPU runs, and a GPU backend (Vulkan, CUDA) only where its
//! driver is installed. The modules and llama.cpp's shared libraries are copied beside the
//! binary (where it looks for them, `$ORIGIN` on Linux), except the Sapphire Rapids build:
//! ggml's AMX kernels crash on the first prompt (llama.cpp issue 20824), so none ships. On
//! Linux the OpenMP runtime llama.cpp's CPU code needs (`libgomp.so.1`, which slim systems
//! lack) is copied beside them too, so that the folder runs anywhere as it is.
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The version of `package` that Cargo.lock pins, if it pins one.
fn locked_version(package: &str) -> Option<String> {
    let lock = std::fs::read_to_string("Cargo.lock").ok()?;
    let mut lines = lock.lines();
    lines.find(|l| *l == format!("name = \"{package}\""))?;
    let version = lines
        .next()?
        .strip_prefix("version = \"")?
        .strip_suffix('"')?;
    Some(version.to_owned())
}

/// The CPU build that holds ggml's AMX kernels.
const NEVER: &str = "sapphirerapids";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=build.rs");
    // The llama.cpp this binary is built with, which a prompt cache on disk is bound to.
    println!("cargo:rerun-if-changed=Cargo.lock");
    println!(
        "cargo:rustc-env=LLAMA_CPP_SYS_VERSION={}",
        locked_version("llama-cpp-sys-2").unwrap_or_else(|| "unknown".into())
    );
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
    let linux = std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux");
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
    // Under the name the libraries ask for, wherever this machine keeps it.
    let mut shipped: Vec<(PathBuf, OsString)> = shipped
        .into_iter()
        .filter_map(|path| Some((path.clone(), path.file_name()?.to_owned())))
        .collect();
    if linux {
        let base = libraries.join("libggml-base.so.0");
        if let Some(openmp) = needed_from_system(&base, "libgomp.so.1") {
            shipped.push((openmp, "libgomp.so.1".into()));
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
        for (path, name) in &shipped {
            let to = folder.join(name);
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
        // DT_RPATH, not DT_RUNPATH: the binary's folder is searched for what its libraries
        // need as well (libggml-base's libgomp), not only for what it needs itself.
        Ok("linux") => println!("cargo:rustc-link-arg=-Wl,-rpath,$ORIGIN,--disable-new-dtags"),
        Ok("macos") => println!("cargo:rustc-link-arg=-Wl,-rpath,@executable_path"),
        _ => {}
    }
    Ok(())
}

/// Where the dynamic loader finds `name`, a library `library` needs, on this machine
/// (`ldd`'s answer), when it is found outside `library`'s folder. Cargo's library path for
/// build scripts (target/<profile>/deps, where an earlier run copied it) is left out.
fn needed_from_system(library: &Path, name: &str) -> Option<PathBuf> {
    let out = std::process::Command::new("ldd")
        .arg(library)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .ok()?;
    let found = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|line| {
            let (needed, at) = line.trim().split_once(" => ")?;
            let at = at.split(" (").next()?.trim();
            (needed == name && at.starts_with('/')).then(|| PathBuf::from(at))
        })?;
    (found.parent() != library.parent()).then_some(found)
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
