//! The test tiers. `scripts/test` runs the whole suite; `scripts/test --fast` runs the unit tests
//! and the end-to-end tests that need no model (scripted hosts and providers, real peers), with
//! `AGENT_AS_MODEL_TIER=fast` set and the tests that run a model skipped by name: the list is
//! `model_tests` in `scripts/test`, the one place it is kept.
//!
//! The list cannot drift silently. Every way a test reaches a model goes through [`needs_model`]:
//! the embedded model's fetch (`local::first_try`, which `http_api::embedded` calls), the
//! model's turn (`local::TURN`, which every test that runs a model takes) and the second
//! architecture's file (`engine::gemma`). In the fast tier it panics, naming the test, so a test
//! that runs a model but is missing from the list fails there instead of fetching 491 MB or
//! loading a model. The server processes of the fast tier are given a model cache they cannot
//! fetch into (`scripts/test` makes it: an empty `models` folder beside a `downloads` file), so
//! a server asked for the embedded model by a test that took no turn fails too.

/// The variable that names the tier: `fast`, or unset for the whole suite.
pub const TIER: &str = "AGENT_AS_MODEL_TIER";

/// Whether this run is the fast tier.
pub fn fast() -> bool {
    std::env::var(TIER).is_ok_and(|t| t == "fast")
}

/// Called on every way a test reaches a model (`what` says which): panics in the fast tier.
pub fn needs_model(what: &str) {
    if fast() {
        let thread = std::thread::current();
        let test = thread.name().unwrap_or("this test");
        panic!(
            "{test} needs a model ({what}) but runs in the fast tier ({TIER}=fast): add it to \
             model_tests in scripts/test"
        );
    }
}

/// The turn the tests that run a model take, one at a time (each process loads its own copy
/// and runs llama.cpp on every core). Taking it is how a test says it runs a model.
pub struct Turn(tokio::sync::Mutex<()>);

impl Turn {
    pub const fn new() -> Self {
        Turn(tokio::sync::Mutex::const_new(()))
    }

    pub async fn lock(&'static self) -> tokio::sync::MutexGuard<'static, ()> {
        needs_model("the model's turn");
        self.0.lock().await
    }

    pub fn blocking_lock(&'static self) -> tokio::sync::MutexGuard<'static, ()> {
        needs_model("the model's turn");
        self.0.blocking_lock()
    }
}
