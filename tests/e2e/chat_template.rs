//! A hostile chat template (a GGUF is a program from whoever published it) rendered in the
//! real binary's sandbox: memory it builds and time it takes end the renderer's process, never
//! this one, and the next prompt renders.

use agent_as_model::call::{Role, Turn};
use agent_as_model::local::template::{self, Sandbox};
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
