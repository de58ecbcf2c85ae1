//! The release build's CPU selection (a build with `--features dynamic-backends`; scripts/test
//! builds and runs it): llama.cpp's CPU backend is built once per x86-64 level and shipped
//! beside the binary, and ggml loads the best one this CPU runs. None of them holds ggml's AMX
//! kernels (the Sapphire Rapids build is not shipped).

use crate::build::{AMX_MARKERS, contains};
use crate::common::venv_bin;
use crate::install::{built_wheel, npm_install, pip_install, run};
use crate::local::{CAPITAL, TURN, answers_paris, first_try, log_line};
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_agent-as-model");

/// ggml's x86-64 CPU builds (ggml/src/CMakeLists.txt) and the CPU features each needs, as
/// /proc/cpuinfo names them.
const VARIANTS: [(&str, &[&str]); 13] = [
    ("x64", &[]),
    ("sse42", &["sse4_2"]),
    ("sandybridge", &["sse4_2", "avx"]),
    ("ivybridge", &["sse4_2", "avx", "f16c"]),
    ("piledriver", &["sse4_2", "avx", "f16c", "fma"]),
    ("haswell", &["sse4_2", "avx", "f16c", "fma", "avx2", "bmi2"]),
    (
        "skylakex",
        &["sse4_2", "avx", "f16c", "fma", "avx2", "bmi2", "avx512f"],
    ),
    (
        "cannonlake",
        &[
            "sse4_2",
            "avx",
            "f16c",
            "fma",
            "avx2",
            "bmi2",
            "avx512f",
            "avx512vbmi",
        ],
    ),
    (
        "cascadelake",
        &[
            "sse4_2",
            "avx",
            "f16c",
            "fma",
            "avx2",
            "bmi2",
            "avx512f",
            "avx512_vnni",
        ],
    ),
    (
        "icelake",
        &[
            "sse4_2",
            "avx",
            "f16c",
            "fma",
            "avx2",
            "bmi2",
            "avx512f",
            "avx512vbmi",
            "avx512_vnni",
        ],
    ),
    (
        "cooperlake",
        &[
            "sse4_2",
            "avx",
            "f16c",
            "fma",
            "avx2",
            "bmi2",
            "avx512f",
            "avx512_vnni",
            "avx512_bf16",
        ],
    ),
    (
        "zen4",
        &[
            "sse4_2",
            "avx",
            "f16c",
            "fma",
            "avx2",
            "bmi2",
            "avx512f",
            "avx512vbmi",
            "avx512_vnni",
            "avx512_bf16",
        ],
    ),
    (
        "alderlake",
        &["sse4_2", "avx", "f16c", "fma", "avx2", "bmi2", "avx_vnni"],
    ),
];

/// The CPU builds shipped beside the binary, by name.
fn shipped() -> Vec<(String, PathBuf)> {
    let folder = Path::new(BIN).parent().unwrap();
    let mut found: Vec<_> = std::fs::read_dir(folder)
        .unwrap()
        .filter_map(|e| {
            let path = e.unwrap().path();
            let name = path.file_name()?.to_str()?;
            let variant = name.strip_prefix("libggml-cpu-")?.strip_suffix(".so")?;
            Some((variant.to_owned(), path.clone()))
        })
        .collect();
    found.sort();
    found
}

fn cpu_flags() -> Vec<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap();
    let flags = info
        .lines()
        .find(|l| l.starts_with("flags"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, f)| f.to_owned())
        .unwrap();
    flags.split_whitespace().map(str::to_owned).collect()
}

fn needs(variant: &str) -> &'static [&'static str] {
    VARIANTS
        .iter()
        .find(|(name, _)| *name == variant)
        .map(|(_, features)| *features)
        .unwrap_or_else(|| panic!("an unknown CPU build {variant:?}"))
}

#[test]
fn every_x86_64_level_ships_and_none_holds_amx_kernels() {
    let shipped = shipped();
    let names: Vec<_> = shipped.iter().map(|(n, _)| n.as_str()).collect();
    for (variant, _) in VARIANTS {
        assert!(
            names.contains(&variant),
            "{variant} is not shipped: {names:?}"
        );
    }
    assert!(!names.contains(&"sapphirerapids"), "{names:?}");
    for (name, path) in &shipped {
        let library = std::fs::read(path).unwrap();
        // The check can see the CPU backend in the file at all.
        assert!(contains(&library, b"ggml-cpu.c"), "{name}: no CPU backend");
        for marker in AMX_MARKERS {
            assert!(
                !contains(&library, marker.as_bytes()),
                "{name} holds {marker:?}"
            );
        }
    }
}

#[tokio::test]
async fn the_best_cpu_build_this_cpu_runs_is_the_one_loaded() {
    let _turn = TURN.lock().await;
    let _ = first_try();
    let (_, stderr) = answers_paris(
        Command::new(BIN)
            .args(["try", CAPITAL])
            .env("RUST_LOG", "warn,llama-cpp-2=info")
            .env_remove("GGML_VK_VISIBLE_DEVICES"),
    );
    let line = log_line(&stderr, "loaded CPU backend from");
    let picked = line
        .split("libggml-cpu-")
        .nth(1)
        .and_then(|rest| rest.split(".so").next())
        .unwrap_or_else(|| panic!("{line}"));
    eprintln!("this CPU runs llama.cpp's {picked} build ({line})");
    let flags = cpu_flags();
    let runs = |variant: &str| needs(variant).iter().all(|f| flags.iter().any(|g| g == f));
    assert!(
        runs(picked),
        "{picked} needs {:?}; this CPU has {flags:?}",
        needs(picked)
    );
    // No shipped build this CPU runs has every feature of the one picked and more.
    for (other, _) in shipped() {
        let better = runs(&other)
            && needs(picked).iter().all(|f| needs(&other).contains(f))
            && needs(&other).len() > needs(picked).len();
        assert!(!better, "{other} runs here and has more than {picked}");
    }
}

/// Without the Vulkan loader (libvulkan.so.1 made unreadable in a mount namespace of the test's
/// own), the Vulkan build starts all the same, says it found no device, and answers on the
/// CPU: its Vulkan backend is a module loaded when it can be, not a library the binary needs.
#[cfg(feature = "vulkan")]
#[tokio::test]
async fn without_the_vulkan_loader_the_vulkan_build_starts_and_runs_on_the_cpu() {
    let _turn = TURN.lock().await;
    let _ = first_try();
    let loader = system_library("libvulkan.so.1")
        .expect("the Vulkan loader is installed (scripts/vulkan-deps)");
    let (_, stderr) = answers_paris(
        hiding(&loader, Path::new(BIN))
            .args(["try", CAPITAL])
            .env("RUST_LOG", "warn")
            .env("GGML_VK_VISIBLE_DEVICES", "0"),
    );
    assert!(stderr.contains("none was found"), "{stderr}");
}

/// The npm package of this build carries llama.cpp's libraries and modules beside its binary,
/// and `npx agent-as-model`, installed from it, loads the CPU build from there, on a system
/// without an OpenMP runtime of its own.
#[tokio::test]
async fn the_npm_package_carries_the_modules_and_its_binary_loads_them() {
    let _turn = TURN.lock().await;
    let _ = first_try();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::temp_dir().join(format!("aam-npm-modules-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let libraries = libraries();
    let platform = dir.join("platform");
    run(Command::new("node")
        .arg(root.join("npm/build.js"))
        .args([BIN, "linux", "x64"])
        .arg(&platform)
        .args(&libraries));
    let app = npm_install(&dir, &platform);
    let (_, stderr) = answers_paris(
        without_openmp(&app.join("node_modules/.bin/agent-as-model"))
            .args(["try", CAPITAL])
            .env("RUST_LOG", "warn,llama-cpp-2=info"),
    );
    let loaded = log_line(&stderr, "loaded CPU backend from");
    assert!(
        loaded.contains("node_modules/@agent-as-model/linux-x64/bin/libggml-cpu-"),
        "{loaded}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The PyPI wheel of this build carries llama.cpp's libraries, its modules and the OpenMP
/// runtime beside its binary (maturin's wheel, repacked by scripts/wheel-libraries as the
/// release does): installed into a fresh environment, its binary starts on a system without
/// an OpenMP runtime of its own and loads the CPU build from the environment's bin/.
#[tokio::test]
async fn the_wheel_carries_the_modules_and_its_binary_loads_them() {
    let _turn = TURN.lock().await;
    let _ = first_try();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let wheel = built_wheel();
    let dir = std::env::temp_dir().join(format!("aam-wheel-modules-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // The release repacks the wheel of the dynamic-backends build; here maturin's wheel of the
    // test build gets this build's binary as well.
    let libraries = libraries();
    run(Command::new(root.join("scripts/wheel-libraries"))
        .arg(&wheel)
        .arg(dir.join("dist"))
        .arg(BIN)
        .args(&libraries)
        .env("PYTHON", venv_bin("python")));
    let repacked = dir.join("dist").join(wheel.file_name().unwrap());
    let venv = dir.join("venv");
    pip_install(&venv, &repacked);
    let bin = venv.join("bin");
    for library in &libraries {
        let name = library.file_name().unwrap();
        assert!(bin.join(name).is_file(), "{name:?} is not in {bin:?}");
    }
    assert!(
        bin.join("libgomp.so.1").is_file(),
        "no OpenMP runtime in {bin:?}"
    );
    let (_, stderr) = answers_paris(
        without_openmp(&bin.join("agent-as-model"))
            .args(["try", CAPITAL])
            .env("RUST_LOG", "warn,llama-cpp-2=info"),
    );
    let loaded = log_line(&stderr, "loaded CPU backend from");
    assert!(
        loaded.contains(&format!("{}/libggml-cpu-", bin.display())),
        "{loaded}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// What the release packs with the binary: the files beside it that scripts/beside-binary
/// lists (llama.cpp's libraries and modules, and the OpenMP runtime build.rs copied there).
fn libraries() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let listed =
        run(Command::new(root.join("scripts/beside-binary")).arg(Path::new(BIN).parent().unwrap()));
    let libraries: Vec<PathBuf> = listed.lines().map(PathBuf::from).collect();
    assert!(
        libraries.iter().any(|l| l.ends_with("libggml-base.so.0"))
            && libraries.iter().any(|l| l.ends_with("libgomp.so.1")),
        "{listed}"
    );
    libraries
}

/// Where this system keeps the library `name` (the file its link names).
fn system_library(name: &str) -> Option<PathBuf> {
    [
        "/usr/lib/x86_64-linux-gnu",
        "/lib/x86_64-linux-gnu",
        "/usr/lib64",
    ]
    .iter()
    .find_map(|dir| std::fs::canonicalize(Path::new(dir).join(name)).ok())
}

/// `program`, to be given its arguments, run where `file` reads as empty: in a mount
/// namespace of its own with /dev/null bound over it.
fn hiding(file: &Path, program: &Path) -> Command {
    let mut command = Command::new("unshare");
    command
        .args([
            "-m",
            "sh",
            "-c",
            r#"mount --bind /dev/null "$1" && shift && exec "$@""#,
            "sh",
        ])
        .arg(file)
        .arg(program);
    command
}

/// `program` run where the system's OpenMP runtime cannot be loaded.
fn without_openmp(program: &Path) -> Command {
    hiding(
        &system_library("libgomp.so.1").expect("libgomp, which llama.cpp's build links"),
        program,
    )
}
