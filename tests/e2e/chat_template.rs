//! A hostile chat template (a GGUF is a program from whoever published it) rendered in the
//! real binary's sandbox: memory it builds and time it takes end the renderer's process, never
//! this one, and the next prompt renders.

use agent_as_model::call::{Role, Turn};
use agent_as_model::local::template::{self, Renderer, Sandbox};
use agent_as_model::wire::openai::{Reader, messages};
use std::time::Duration;

fn sandboxed(memory: u64) -> Sandbox {
    Sandbox {
        program: crate::common::server::BIN.into(),
        memory,
    }
}

fn hi() -> Vec<agent_as_model::wire::openai::Message> {
    messages(None, &[Turn::text(Role::User, "hi")], Reader::Template)
}

/// `hi` rendered with the template `t` (ChatML without one) in `sandbox`.
fn rendered(sandbox: &Sandbox, t: Option<&str>) -> Result<String, template::TemplateError> {
    sandbox.render(t, &template::Chat::new(&hi(), &[]))
}

/// One test: each rendering in the one sandbox.
#[test]
fn a_hostile_template_ends_its_renderer_not_the_server() {
    let sandbox = sandboxed(256 << 20);
    // An ordinary prompt renders in the sandbox as it does on a thread.
    let prompt = rendered(&sandbox, None).unwrap();
    assert_eq!(
        prompt,
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    );

    // A 1 MB string doubled twelve times: 4 GB in fourteen steps, writing a few bytes. Fuel and
    // the output cap let it through; on a thread it aborts the whole process.
    let t = format!(
        "{{% set s = 'x' * 1000000 %}}{}{{{{ s | length }}}}",
        "{% set s = s ~ s %}".repeat(12)
    );
    let apart = sandbox.clone();
    let e = crate::common::before_blocking(Duration::from_secs(10), "the memory cap", move || {
        rendered(&apart, Some(&t)).unwrap_err().to_string()
    });
    assert!(
        e.contains("chat template used more than 268435456 bytes of memory")
            && e.contains("AGENT_AS_MODEL_CHAT_TEMPLATE_MEMORY_BYTES"),
        "{e}"
    );
    // `join`, `replace` and `*` build values just as well.
    for t in [
        "{% set s = ['x' * 1000000] * 4096 %}{{ s | join('') | length }}",
        "{% set s = 'x' * 1000000 %}{{ s | replace('x', 'y' * 512) | length }}",
    ] {
        let e = rendered(&sandbox, Some(t)).unwrap_err().to_string();
        assert!(e.contains("bytes of memory"), "{t}: {e}");
    }
    // The next prompt renders.
    assert_eq!(rendered(&sandbox, None).unwrap(), prompt);

    // Slow steps: fuel lets this run for minutes. At the deadline the renderer is killed, not
    // left running, so the next prompt renders at once rather than waiting for it.
    let t = "{% for a in range(100000) %}{% set x = 'x' * (10000000 - a) %}{% endfor %}";
    let apart = sandbox.clone();
    let e = crate::common::before_blocking(Duration::from_secs(20), "the deadline", move || {
        rendered(&apart, Some(t)).unwrap_err().to_string()
    });
    assert!(e.contains("chat template ran too long (over 10s)"), "{e}");
    assert_eq!(rendered(&sandbox, None).unwrap(), prompt);
}

/// `hi` rendered with the template `t` (ChatML without one) by `renderer`.
fn kept(renderer: &Renderer, t: Option<&str>) -> Result<String, template::TemplateError> {
    renderer.render(t, &template::Chat::new(&hi(), &[]))
}

/// The engines' renderer: its process, started for the first prompt, renders every prompt
/// after it; prompts at the same time each have one, and one is kept.
#[test]
fn one_renderer_process_renders_prompt_after_prompt() {
    let renderer = Renderer::new(sandboxed(256 << 20));
    assert_eq!(renderer.pid(), None, "started when first needed");
    let prompt = kept(&renderer, None).unwrap();
    let pid = renderer.pid().unwrap();
    for _ in 0..50 {
        assert_eq!(kept(&renderer, None).unwrap(), prompt);
        assert_eq!(renderer.pid(), Some(pid));
    }
    assert_eq!(renderer.spawned(), 1);
    let apart = renderer.clone();
    let all = crate::common::before_blocking(Duration::from_secs(30), "four threads", move || {
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let renderer = apart.clone();
                std::thread::spawn(move || (0..20).map(|_| kept(&renderer, None)).collect())
            })
            .collect();
        let rendered: Vec<Vec<_>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        rendered.into_iter().flatten().collect::<Vec<_>>()
    });
    assert_eq!(all.len(), 80);
    assert!(
        all.iter()
            .all(|p| p.as_deref().ok() == Some(prompt.as_str()))
    );
    assert!(renderer.pid().is_some());
}

/// Whether the process `pid` is gone: reaped, or killed and not yet reaped.
fn gone(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The state follows the command's name in parentheses.
    stat.rsplit_once(") ")
        .is_none_or(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X'))
}

/// A renderer process that ends (past its memory), that is killed at the deadline, or that is
/// killed from outside while it waits, is replaced: the next prompt renders in a fresh one.
#[test]
fn a_renderer_process_that_ends_is_replaced() {
    let renderer = Renderer::new(sandboxed(256 << 20));
    let prompt = kept(&renderer, None).unwrap();
    let first = renderer.pid().unwrap();
    let t = "{% set s = ['x' * 1000000] * 4096 %}{{ s | join('') | length }}";
    let e = kept(&renderer, Some(t)).unwrap_err().to_string();
    assert!(
        e.contains("chat template used more than 268435456 bytes"),
        "{e}"
    );
    assert!(renderer.pid().is_none() && gone(first));
    assert_eq!(kept(&renderer, None).unwrap(), prompt);
    let second = renderer.pid().unwrap();
    assert_eq!((renderer.spawned(), second != first), (2, true));

    // Killed while it waits for the next prompt: that prompt goes to a fresh process.
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &second.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let started = std::time::Instant::now();
    while !gone(second) {
        assert!(started.elapsed() < Duration::from_secs(10), "never ended");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(kept(&renderer, None).unwrap(), prompt);
    let third = renderer.pid().unwrap();
    assert_eq!(renderer.spawned(), 3);

    // Slow steps: killed at the deadline (and reaped), and the next prompt renders.
    let t = "{% for a in range(100000) %}{% set x = 'x' * (10000000 - a) %}{% endfor %}";
    let apart = renderer.clone();
    let e = crate::common::before_blocking(Duration::from_secs(20), "the deadline", move || {
        kept(&apart, Some(t)).unwrap_err().to_string()
    });
    assert!(e.contains("chat template ran too long (over 10s)"), "{e}");
    assert!(!std::path::Path::new(&format!("/proc/{third}")).exists());
    assert_eq!(kept(&renderer, None).unwrap(), prompt);
    assert_eq!(renderer.spawned(), 4);
}
