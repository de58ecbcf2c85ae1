//! The chat prompt, rendered with the Jinja chat template the model carries in its metadata
//! (`tokenizer.chat_template`) as Hugging Face transformers' `apply_chat_template` renders it:
//! the same context (messages, tools, special tokens, the request's template arguments) in
//! the same environment ([`super::jinja`]).

use super::jinja;
use crate::wire::openai::{Message, Tool};
use serde_json::{Map, Value};
use std::io;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, mpsc};
use std::time::{Duration, Instant};

/// ChatML, for a model that carries no template.
const CHATML: &str = "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

// A GGUF's chat template is a program from whoever published the file, run on every call:
// it runs within limits. Real templates (Qwen, Llama, Gemma, DeepSeek) take some 30 to 60
// steps and a few dozen bytes besides the text for each message; the limits are over a
// hundred times that, and grow with the conversation.

/// The steps (minijinja's fuel) any prompt may take …
const FUEL: u64 = 1_000_000;
/// … and the steps each message or tool adds.
const FUEL_PER_ITEM: u64 = 10_000;
/// The bytes any prompt may come to …
const OUTPUT: usize = 1 << 20;
/// … and how many times the bytes of the messages and tools it may add.
const OUTPUT_PER_BYTE: usize = 4;
/// How long a template may run: fuel counts steps, but a single step can take long (a
/// string repeated to 100 MB), so the clock bounds them too.
pub const DEADLINE: Duration = Duration::from_secs(10);

// Fuel and the output cap bound steps and what is written, not the values a template builds:
// `{% set s = s ~ s %}` doubles a string in one step, and twelve of them on a 10 MB string ask
// for 40 GB. minijinja offers no hook on `~`, `+`, `*` or its filters, and an allocation that
// fails aborts the whole process, so on Linux the template runs in a child process of its own
// (this binary, re-executed with `HELPER_ARG`): its address space is limited to the memory
// setting, an allocation past it ends the child alone, and at the deadline it is killed rather
// than abandoned. Elsewhere, and where no sandbox is given (a library user, unit tests), the
// template runs on a thread as before. The sandbox is a value, not the process's: `main` sets
// one up in the server's engines (`pool::Engines`), whose models render in its `Renderer`,
// which keeps its process from one rendering to the next.

/// The first argument that makes this binary the chat template's renderer (see
/// [`helper_main`]).
pub const HELPER_ARG: &str = "__agent-as-model-render-chat-template";

/// Where chat templates run: the program to re-execute (this binary) and the memory a
/// rendering may use beyond what the program takes when it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    pub program: std::path::PathBuf,
    /// Bytes of address space a rendering may add (AGENT_AS_MODEL_CHAT_TEMPLATE_MEMORY_BYTES).
    pub memory: u64,
}

impl Sandbox {
    /// Renders the prompt as [`render`] does, in this sandbox, in a renderer process started
    /// for this one rendering (on a thread where the system cannot limit a child's memory:
    /// only Linux does). A server renders in its engines' [`Renderer`] instead, which keeps
    /// its process.
    pub fn render(&self, template: Option<&str>, chat: &Chat<'_>) -> Result<String, TemplateError> {
        Renderer::new(self.clone()).render(template, chat)
    }
}

/// Why the model's chat template did not render the prompt.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// A rendering that ran past its deadline still runs (see [`LATE`]).
    #[error(
        "the model's chat template is still running from an earlier call that ran over \
         {deadline:?}; try again later or use another model"
    )]
    StillRunning { deadline: Duration },
    #[error("the model's chat template could not be run: {0}")]
    Thread(#[source] io::Error),
    #[error("the model's chat template ran too long (over {deadline:?})")]
    Deadline { deadline: Duration },
    #[error("the model's chat template ran too long (over {fuel} steps)")]
    Fuel { fuel: u64 },
    #[error("the model's chat template produced more than {cap} bytes")]
    Output { cap: usize },
    #[error(
        "the model's chat template used more than {limit} bytes of memory and was stopped \
         (AGENT_AS_MODEL_CHAT_TEMPLATE_MEMORY_BYTES)"
    )]
    Memory { limit: u64 },
    /// Its thread ended without a result, or its output is not UTF-8.
    #[error("the model's chat template failed")]
    Failed,
    /// Its process ended without a result, for another reason than memory.
    #[error("the model's chat template's renderer ended without a result ({0})")]
    Crashed(String),
    #[error("the model's chat template failed: {0}")]
    Render(String),
}

/// The prompt of a base model (one without a chat template that knows no ChatML): the
/// messages' texts, one after the other, for the model to continue.
pub fn plain(messages: &[Message]) -> String {
    messages
        .iter()
        .filter_map(Message::as_text)
        .filter(|c| !c.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// The tokenizer's special tokens as text, which transformers gives every template as
/// `bos_token`, `eos_token`, `unk_token` and `pad_token` (those the tokenizer has).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    pub bos: Option<String>,
    pub eos: Option<String>,
    pub unk: Option<String>,
    pub pad: Option<String>,
}

impl SpecialTokens {
    /// The tokens present, by the names templates read them by.
    fn named(&self) -> impl Iterator<Item = (&'static str, &String)> {
        [
            ("bos_token", &self.bos),
            ("eos_token", &self.eos),
            ("unk_token", &self.unk),
            ("pad_token", &self.pad),
        ]
        .into_iter()
        .filter_map(|(name, token)| token.as_ref().map(|t| (name, t)))
    }
}

/// A conversation to render, as `apply_chat_template` takes it.
#[derive(Debug, Clone, Copy)]
pub struct Chat<'a> {
    pub messages: &'a [Message],
    /// The tools offered; none is `tools=None`.
    pub tools: &'a [Tool],
    /// End with the start of the assistant's turn.
    pub add_generation_prompt: bool,
    pub special: Option<&'a SpecialTokens>,
    /// The request's template arguments (`chat_template_kwargs`, e.g. `enable_thinking`).
    pub kwargs: Option<&'a Map<String, Value>>,
}

impl<'a> Chat<'a> {
    /// `messages` and `tools`, ending with the start of the assistant's turn.
    pub fn new(messages: &'a [Message], tools: &'a [Tool]) -> Self {
        Chat {
            messages,
            tools,
            add_generation_prompt: true,
            special: None,
            kwargs: None,
        }
    }

    /// The template's context, as transformers builds it: the special tokens, the template
    /// arguments over them, then `messages`, `tools` and `documents` (`None` when there are
    /// none) and `add_generation_prompt`.
    pub fn context(&self) -> Value {
        let mut context = Map::new();
        for (name, token) in self.special.into_iter().flat_map(SpecialTokens::named) {
            context.insert(name.to_owned(), Value::String(token.clone()));
        }
        for (name, value) in self.kwargs.into_iter().flatten() {
            context.insert(name.clone(), value.clone());
        }
        context.insert("messages".into(), json(&self.messages));
        let tools = (!self.tools.is_empty()).then_some(self.tools);
        context.insert("tools".into(), json(&tools));
        context.insert("documents".into(), Value::Null);
        context.insert(
            "add_generation_prompt".into(),
            Value::Bool(self.add_generation_prompt),
        );
        Value::Object(context)
    }
}

/// A value as JSON (messages and tools always are).
fn json(value: &impl serde::Serialize) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// Renders the prompt with `template` (ChatML when the model has none), on a thread. A template
/// that takes too many steps, runs too long or writes too much fails the call, saying so.
pub fn render(template: Option<&str>, chat: &Chat<'_>) -> Result<String, TemplateError> {
    render_in(None, template, chat)
}

/// [`render`], in `renderer`'s processes when one is given (and the system limits a child's
/// memory).
pub fn render_in(
    renderer: Option<&Renderer>,
    template: Option<&str>,
    chat: &Chat<'_>,
) -> Result<String, TemplateError> {
    context_in(renderer, template.unwrap_or(CHATML), chat.context())
}

/// Renders `template` with `context` as it is (an object of the names the template reads), on a
/// thread, within limits that grow with the messages and tools it holds.
pub fn render_context(template: &str, context: Value) -> Result<String, TemplateError> {
    context_in(None, template, context)
}

/// [`render_context`], in `renderer`'s processes when one is given and the system limits a
/// child's memory (only Linux does; elsewhere on a thread).
fn context_in(
    renderer: Option<&Renderer>,
    template: &str,
    context: Value,
) -> Result<String, TemplateError> {
    let bytes = serde_json::to_vec(&context).map_or(0, |v| v.len());
    let count = |name: &str| {
        context
            .get(name)
            .and_then(Value::as_array)
            .map_or(0, Vec::len)
    };
    let limits = Limits::scaled(count("messages").saturating_add(count("tools")), bytes);
    match renderer.filter(|_| cfg!(target_os = "linux")) {
        Some(renderer) => renderer.isolated(template, &context, limits),
        None => guarded(template, context, limits, &LATE),
    }
}

/// What one rendering may take.
#[derive(Debug, Clone, Copy)]
struct Limits {
    fuel: u64,
    output: usize,
    deadline: Duration,
}

impl Limits {
    /// The limits for a prompt of `items` messages and tools, `bytes` long in JSON.
    fn scaled(items: usize, bytes: usize) -> Self {
        let items = u64::try_from(items).unwrap_or(u64::MAX);
        Limits {
            fuel: FUEL.saturating_add(FUEL_PER_ITEM.saturating_mul(items)),
            output: OUTPUT.saturating_add(OUTPUT_PER_BYTE.saturating_mul(bytes)),
            deadline: DEADLINE,
        }
    }
}

/// Whether a rendering that ran past its deadline is still running (the thread cannot be
/// stopped; its fuel ends it in time). Until it ends, no other rendering starts, so that a
/// template that keeps running late does not pile up threads.
static LATE: AtomicBool = AtomicBool::new(false);

/// A rendering's state, shared by the caller and the thread that runs it.
const RUNNING: u8 = 0;
const DONE: u8 = 1;
const ABANDONED: u8 = 2;

/// Renders on a thread of its own, waiting at most the deadline for it.
fn guarded(
    template: &str,
    context: serde_json::Value,
    limits: Limits,
    late: &'static AtomicBool,
) -> Result<String, TemplateError> {
    if late.load(Ordering::Acquire) {
        return Err(TemplateError::StillRunning {
            deadline: limits.deadline,
        });
    }
    let template = template.to_owned();
    let state = Arc::new(AtomicU8::new(RUNNING));
    let (tx, rx) = mpsc::sync_channel(1);
    let shared = Arc::clone(&state);
    std::thread::Builder::new()
        .name("chat-template".into())
        .stack_size(8 << 20)
        .spawn(move || {
            let _ending = Ending {
                state: shared,
                late,
            };
            let _ = tx.send(run(&template, context, limits));
        })
        .map_err(TemplateError::Thread)?;
    match rx.recv_timeout(limits.deadline) {
        Ok(result) => result,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            if state
                .compare_exchange(RUNNING, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                late.store(true, Ordering::Release);
                Err(TemplateError::Deadline {
                    deadline: limits.deadline,
                })
            } else {
                // It finished just now, its result already sent.
                rx.recv().unwrap_or(Err(TemplateError::Failed))
            }
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => Err(TemplateError::Failed),
    }
}

/// Marks a rendering done as its thread ends (a panic too); if the caller gave up on it,
/// others may run again.
struct Ending {
    state: Arc<AtomicU8>,
    late: &'static AtomicBool,
}

impl Drop for Ending {
    fn drop(&mut self) {
        if self
            .state
            .compare_exchange(RUNNING, DONE, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            self.late.store(false, Ordering::Release);
        }
    }
}

/// Renders with fuel, into output that refuses to grow past the cap.
fn run(
    template: &str,
    context: serde_json::Value,
    limits: Limits,
) -> Result<String, TemplateError> {
    let cap = limits.output;
    let (env, over) = environment(limits);
    let mut output = Capped {
        bytes: Vec::new(),
        cap,
        over: false,
    };
    let template = jinja::without_generation_tags(template);
    let rendered = env
        .template_from_str(&template)
        .and_then(|t| t.render_captured_to(context, &mut output).map(drop));
    if output.over || over.load(Ordering::Relaxed) {
        return Err(TemplateError::Output { cap });
    }
    match rendered {
        Ok(()) => String::from_utf8(output.bytes).map_err(|_| TemplateError::Failed),
        Err(e) if e.kind() == minijinja::ErrorKind::OutOfFuel => {
            Err(TemplateError::Fuel { fuel: limits.fuel })
        }
        Err(e) => Err(TemplateError::Render(e.to_string())),
    }
}

/// The environment templates run in: transformers' ([`jinja::configure`]), `limits.fuel`
/// steps, and a formatter that writes values as Python's `str()` does and counts what every
/// `{{ … }}` writes against the output cap, wherever it goes (text written into
/// `{% set x %}…{% endset %}` does not reach the output). The flag says the formatter stopped
/// the rendering at the cap.
fn environment(limits: Limits) -> (minijinja::Environment<'static>, Arc<AtomicBool>) {
    let mut env = minijinja::Environment::new();
    jinja::configure(&mut env);
    env.set_fuel(Some(limits.fuel));
    let count = AtomicUsize::new(0);
    let over = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&over);
    let cap = limits.output;
    env.set_formatter(move |out, _state, value| {
        let text = match value.as_str() {
            Some(s) => std::borrow::Cow::Borrowed(s),
            None => std::borrow::Cow::Owned(jinja::python_str(value)),
        };
        let total = count
            .fetch_add(text.len(), Ordering::Relaxed)
            .saturating_add(text.len());
        if total > cap {
            flag.store(true, Ordering::Relaxed);
            return Err(minijinja::Error::new(
                minijinja::ErrorKind::InvalidOperation,
                "output over the cap",
            ));
        }
        out.write_str(&text).map_err(minijinja::Error::from)
    });
    (env, over)
}

/// The output, refusing a write that would take it past the cap.
struct Capped {
    bytes: Vec<u8>,
    cap: usize,
    over: bool,
}

impl io::Write for Capped {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.bytes.len().saturating_add(buf.len()) > self.cap {
            self.over = true;
            return Err(io::Error::other("output over the cap"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// One rendering, as the parent hands it to the renderer's process.
#[derive(serde::Serialize)]
struct Job<'a> {
    template: &'a str,
    context: &'a serde_json::Value,
    fuel: u64,
    output: usize,
}

/// [`Job`] as the renderer reads it.
#[derive(serde::Deserialize)]
struct OwnedJob {
    template: String,
    context: serde_json::Value,
    fuel: u64,
    output: usize,
}

/// What the renderer's process answers.
#[derive(serde::Serialize, serde::Deserialize)]
enum Reply {
    Ok(String),
    Fuel,
    Output,
    Failed,
    Render(String),
}

impl Reply {
    /// The renderer's answer to a job, from its rendering.
    fn of(rendered: Result<String, TemplateError>) -> Self {
        match rendered {
            Ok(text) => Reply::Ok(text),
            Err(TemplateError::Fuel { .. }) => Reply::Fuel,
            Err(TemplateError::Output { .. }) => Reply::Output,
            Err(TemplateError::Render(message)) => Reply::Render(message),
            Err(_) => Reply::Failed,
        }
    }

    /// The rendering it answers, under `limits`.
    fn rendered(self, limits: Limits) -> Result<String, TemplateError> {
        match self {
            Reply::Ok(text) => Ok(text),
            Reply::Fuel => Err(TemplateError::Fuel { fuel: limits.fuel }),
            Reply::Output => Err(TemplateError::Output { cap: limits.output }),
            Reply::Failed => Err(TemplateError::Failed),
            Reply::Render(message) => Err(TemplateError::Render(message)),
        }
    }
}

/// Most bytes read from the renderer's stderr (an allocation failure's one line).
const STDERR_CAP: u64 = 16 * 1024;

/// The renderer processes a [`Renderer`] keeps between renderings. A rendering takes one (or
/// starts one when none is kept) and gives it back when it answered; renderings at the same
/// time each have their own, and those beyond this many end once they answered.
const KEPT: usize = 1;

// The renderer's process serves one job after another for as long as it runs. Each job and each
// reply is a frame on its stdin and stdout: its length (8 bytes, little-endian), then the JSON
// of a `Job` or a `Reply`. The process stays as long as it answers: one that ran past the
// deadline is killed, and one that ended (an allocation past its memory limit aborts it) is
// reaped and its stderr read for the reason; the next rendering starts a fresh one. One kept
// between renderings that is found gone before it read the job (killed from outside) is
// replaced at once, and the job given to the fresh one.

/// Where a server's chat templates render: renderer processes in a [`Sandbox`], started when
/// first needed and kept for the renderings after (see [`KEPT`]), so that a prompt pays for a
/// request and its reply over pipes rather than for starting a process. Cheap to clone (the
/// processes are shared); the last clone to go kills them.
#[derive(Clone)]
pub struct Renderer(Arc<Kept>);

/// A [`Renderer`]'s sandbox, the processes it keeps, and how many it started.
struct Kept {
    sandbox: Sandbox,
    idle: Mutex<Vec<Process>>,
    spawned: AtomicU64,
}

impl std::fmt::Debug for Renderer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Renderer")
            .field("sandbox", &self.0.sandbox)
            .field("spawned", &self.spawned())
            .finish()
    }
}

impl Renderer {
    /// A renderer in `sandbox`, with no process yet.
    pub fn new(sandbox: Sandbox) -> Self {
        Renderer(Arc::new(Kept {
            sandbox,
            idle: Mutex::new(Vec::new()),
            spawned: AtomicU64::new(0),
        }))
    }

    /// Renders the prompt as [`render`] does, in one of its processes (on a thread where the
    /// system cannot limit a child's memory: only Linux does).
    pub fn render(&self, template: Option<&str>, chat: &Chat<'_>) -> Result<String, TemplateError> {
        render_in(Some(self), template, chat)
    }

    /// How many renderer processes it has started.
    pub fn spawned(&self) -> u64 {
        self.0.spawned.load(Ordering::Relaxed)
    }

    /// The id of the process kept for the next rendering, if one is.
    pub fn pid(&self) -> Option<u32> {
        self.idle().first().map(|p| p.child.id())
    }

    /// The processes kept between renderings.
    fn idle(&self) -> MutexGuard<'_, Vec<Process>> {
        self.0.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A process for the next rendering: a kept one (`true`), or one started now.
    fn take(&self) -> Result<(Process, bool), TemplateError> {
        if let Some(process) = self.idle().pop() {
            return Ok((process, true));
        }
        let process = Process::start(&self.0.sandbox)?;
        self.0.spawned.fetch_add(1, Ordering::Relaxed);
        Ok((process, false))
    }

    /// Keeps `process` for a later rendering, or ends it when enough are kept.
    fn keep(&self, process: Process) {
        let mut idle = self.idle();
        if idle.len() < KEPT {
            idle.push(process);
        }
    }

    /// Renders in one of its processes, within `limits` (killed at the deadline).
    fn isolated(
        &self,
        template: &str,
        context: &serde_json::Value,
        limits: Limits,
    ) -> Result<String, TemplateError> {
        let mut job = serde_json::to_vec(&Job {
            template,
            context,
            fuel: limits.fuel,
            output: limits.output,
        })
        .map_err(|e| TemplateError::Thread(io::Error::other(e)))?;
        // A reply is the output as a JSON string: at most six bytes for each byte, and a little.
        let cap = u64::try_from(limits.output)
            .unwrap_or(u64::MAX)
            .saturating_mul(6)
            .saturating_add(1024);
        let started = Instant::now();
        loop {
            let (process, kept) = self.take()?;
            let left = limits.deadline.saturating_sub(started.elapsed());
            match process.ask(job, cap, left) {
                // A kept process that was gone before it read the job: the job goes to another.
                Ok(Heard::Ended(_, Some(unread))) if kept => job = unread,
                heard => return self.answer(heard, process, started, limits),
            }
        }
    }

    /// What a process's answer to a rendering (`heard`) says: the text, the limit it reached,
    /// or how it failed. A process that answered is kept; any other ends here.
    fn answer(
        &self,
        heard: Result<Heard, mpsc::RecvTimeoutError>,
        mut process: Process,
        started: Instant,
        limits: Limits,
    ) -> Result<String, TemplateError> {
        match heard {
            Ok(Heard::Reply(out)) => match serde_json::from_slice::<Reply>(&out) {
                Ok(reply) => {
                    self.keep(process);
                    reply.rendered(limits)
                }
                Err(_) => Err(TemplateError::Failed),
            },
            Ok(Heard::Ended(err, _)) => {
                // Its pipes are closed: it is ending.
                let status = exit_within(&mut process.child, started, limits.deadline);
                Err(ended(&err, status, self.0.sandbox.memory))
            }
            Err(mpsc::RecvTimeoutError::Timeout) => Err(TemplateError::Deadline {
                deadline: limits.deadline,
            }),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(TemplateError::Failed),
        }
    }
}

/// What the thread at a renderer's pipes heard: a reply; or that the process is gone, its
/// stderr, and the job when it never read it.
enum Heard {
    Reply(Vec<u8>),
    Ended(Vec<u8>, Option<Vec<u8>>),
}

/// A renderer's process and the thread that talks to it: jobs (with the most bytes their reply
/// may take) go to the thread, what it hears comes back. Dropped, the process is killed.
struct Process {
    child: Child,
    jobs: mpsc::Sender<(Vec<u8>, u64)>,
    heard: mpsc::Receiver<Heard>,
}

impl Process {
    /// Starts a renderer process in `sandbox`, and the thread at its pipes.
    fn start(sandbox: &Sandbox) -> Result<Self, TemplateError> {
        let (mut child, stdin, stdout, stderr) = spawn_renderer(sandbox)?;
        let (jobs, to_write) = mpsc::channel();
        let (hears, heard) = mpsc::channel();
        let talking = std::thread::Builder::new()
            .name("chat-template".into())
            .spawn(move || converse(stdin, stdout, stderr, &to_write, &hears));
        if let Err(e) = talking {
            end(&mut child);
            return Err(TemplateError::Thread(e));
        }
        Ok(Process { child, jobs, heard })
    }

    /// Hands `job` to the process and waits `deadline` at most for what comes back.
    fn ask(
        &self,
        job: Vec<u8>,
        cap: u64,
        deadline: Duration,
    ) -> Result<Heard, mpsc::RecvTimeoutError> {
        self.jobs
            .send((job, cap))
            .map_err(|_| mpsc::RecvTimeoutError::Disconnected)?;
        self.heard.recv_timeout(deadline)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        end(&mut self.child);
    }
}

/// The renderer's pipes, on a thread of their own: writes each job it is given and hands on
/// the reply it reads (at most the bytes given with the job); once the process is gone (a write
/// fails, its output ends, a reply is too long) reads its stderr and says so. It ends then, or
/// when its process is dropped.
fn converse(
    mut stdin: ChildStdin,
    stdout: ChildStdout,
    stderr: ChildStderr,
    jobs: &mpsc::Receiver<(Vec<u8>, u64)>,
    heard: &mpsc::Sender<Heard>,
) {
    use std::io::Read;
    let mut stdout = io::BufReader::new(stdout);
    let mut unread = None;
    for (job, cap) in jobs {
        // A process that is gone closed its stdin: the write fails.
        if write_frame(&mut stdin, &job).is_err() {
            unread = Some(job);
            break;
        }
        drop(job);
        let Ok(Some(reply)) = read_frame(&mut stdout, cap) else {
            break;
        };
        if heard.send(Heard::Reply(reply)).is_err() {
            break;
        }
    }
    // Closed, the pipes end a process that still writes or reads them.
    drop(stdin);
    drop(stdout);
    let mut err = Vec::new();
    let _ = stderr.take(STDERR_CAP).read_to_end(&mut err);
    let _ = heard.send(Heard::Ended(err, unread));
}

/// Writes one frame: the length of `bytes` (8 bytes, little-endian), then the bytes.
fn write_frame(output: &mut impl io::Write, bytes: &[u8]) -> io::Result<()> {
    let len = u64::try_from(bytes.len()).map_err(io::Error::other)?;
    output.write_all(&len.to_le_bytes())?;
    output.write_all(bytes)?;
    output.flush()
}

/// Reads one frame of at most `cap` bytes; `None` where the input ends before one.
fn read_frame(input: &mut impl io::Read, cap: u64) -> io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    let mut len = [0; 8];
    match input.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u64::from_le_bytes(len);
    if len > cap {
        return Err(io::Error::other(format!(
            "a frame of {len} bytes, over {cap}"
        )));
    }
    let mut bytes = Vec::new();
    input.by_ref().take(len).read_to_end(&mut bytes)?;
    if u64::try_from(bytes.len()) != Ok(len) {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(Some(bytes))
}

/// The renderer's process, limited to `sandbox.memory`, and its three pipes.
fn spawn_renderer(
    sandbox: &Sandbox,
) -> Result<(Child, ChildStdin, ChildStdout, ChildStderr), TemplateError> {
    let mut child = Command::new(&sandbox.program)
        .arg(HELPER_ARG)
        .arg(sandbox.memory.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(TemplateError::Thread)?;
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        end(&mut child);
        return Err(TemplateError::Failed);
    };
    Ok((child, stdin, stdout, stderr))
}

/// The renderer's exit status, waited for until `deadline` after `started`; killed then (no
/// status).
fn exit_within(
    child: &mut std::process::Child,
    started: Instant,
    deadline: Duration,
) -> Option<std::process::ExitStatus> {
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if started.elapsed() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            _ => {
                end(child);
                return None;
            }
        }
    }
}

/// Why a renderer's process ended without a reply, from its stderr (`err`) and its exit
/// `status`: its memory limit (`memory`), or another reason.
fn ended(err: &[u8], status: Option<std::process::ExitStatus>, memory: u64) -> TemplateError {
    if String::from_utf8_lossy(err).contains("memory allocation of") {
        return TemplateError::Memory { limit: memory };
    }
    TemplateError::Crashed(match status {
        Some(status) => status.to_string(),
        None => "it did not exit".to_owned(),
    })
}

/// Kills the renderer's process and reaps it (a killed process ends at once).
fn end(child: &mut std::process::Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// When this process was started as the chat template's renderer (`HELPER_ARG MEMORY` as its
/// arguments), serves the jobs on its stdin until it ends and gives the exit code; otherwise
/// `None`. The binary calls this first thing.
pub fn helper_main() -> Option<std::process::ExitCode> {
    let mut args = std::env::args_os().skip(1);
    if args.next()? != HELPER_ARG {
        return None;
    }
    let memory = args
        .next()
        .and_then(|m| m.to_str().and_then(|m| m.parse::<u64>().ok()));
    Some(helper(memory))
}

/// The renderer's process: limits its memory, then answers each job on stdin on stdout.
fn helper(memory: Option<u64>) -> std::process::ExitCode {
    use std::process::ExitCode;
    // A rendering that cannot be bounded does not run.
    let Some(memory) = memory else {
        eprintln!("{HELPER_ARG}: expected the memory limit in bytes");
        return ExitCode::from(2);
    };
    if let Err(e) = limit_memory(memory) {
        eprintln!("{HELPER_ARG}: cannot limit memory: {e}");
        return ExitCode::from(2);
    }
    let mut output = io::BufWriter::new(io::stdout().lock());
    match serve(&mut io::stdin().lock(), &mut output) {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}

/// Answers each job framed on `input` with its reply framed on `output`, until the input ends.
fn serve(input: &mut impl io::Read, output: &mut impl io::Write) -> io::Result<()> {
    while let Some(frame) = read_frame(input, u64::MAX)? {
        let job = serde_json::from_slice::<OwnedJob>(&frame);
        drop(frame);
        let reply = match job {
            Ok(job) => {
                let limits = Limits {
                    fuel: job.fuel,
                    output: job.output,
                    deadline: DEADLINE,
                };
                Reply::of(run(&job.template, job.context, limits))
            }
            Err(_) => Reply::Failed,
        };
        let bytes = serde_json::to_vec(&reply).map_err(io::Error::other)?;
        drop(reply);
        write_frame(output, &bytes)?;
    }
    Ok(())
}

/// Limits this process's address space to what it uses now plus `memory` bytes, and its core
/// dumps to nothing (an allocation past the limit aborts it).
#[cfg(target_os = "linux")]
fn limit_memory(memory: u64) -> io::Result<()> {
    // VmSize, in pages, is the first field of statm.
    let statm = std::fs::read_to_string("/proc/self/statm")?;
    let pages = statm
        .split_whitespace()
        .next()
        .and_then(|p| p.parse::<u64>().ok())
        .ok_or_else(|| io::Error::other("/proc/self/statm has no size"))?;
    // SAFETY: sysconf reads a constant of the system.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let page = u64::try_from(page).map_err(|_| io::Error::other("no page size"))?;
    let limit = pages.saturating_mul(page).saturating_add(memory);
    set_limit(libc::RLIMIT_CORE, 0)?;
    set_limit(libc::RLIMIT_AS, limit)
}

/// A resource's number, as the C library spells its type.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
type Resource = libc::__rlimit_resource_t;
#[cfg(all(target_os = "linux", not(target_env = "gnu")))]
type Resource = libc::c_int;

/// Lowers the soft limit of `resource` to `value` (never above its hard limit).
#[cfg(target_os = "linux")]
fn set_limit(resource: Resource, value: u64) -> io::Result<()> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the limit it reads into `limit`, which outlives the call.
    if unsafe { libc::getrlimit(resource, &raw mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let value = libc::rlim_t::try_from(value).unwrap_or(libc::RLIM_INFINITY);
    limit.rlim_cur = value.min(limit.rlim_max);
    // SAFETY: setrlimit reads `limit`, which outlives the call.
    if unsafe { libc::setrlimit(resource, &raw const limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Only Linux limits the renderer's memory; elsewhere it is not started (see [`render_in`]).
#[cfg(not(target_os = "linux"))]
fn limit_memory(_memory: u64) -> io::Result<()> {
    Err(io::Error::other("only Linux limits the renderer's memory"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn chatml_and_tojson() {
        use crate::call::{Role, Turn};
        use crate::wire::openai::{Reader, messages};
        let m = messages(
            Some("sys"),
            &[Turn::text(Role::User, "hi")],
            Reader::Template,
        );
        let prompt = render(None, &Chat::new(&m, &[])).unwrap();
        assert_eq!(
            prompt,
            "<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(plain(&m), "sys\n\nhi");
        let mut params = serde_json::Map::new();
        params.insert("a".into(), json!([1, "é"]));
        let t = "{{ tools[0].function.parameters | tojson }}";
        assert_eq!(
            render(
                Some(t),
                &Chat::new(&m, &[Tool::function("f", None, &params)])
            )
            .unwrap(),
            "{\"a\": [1, \"é\"]}"
        );
    }

    #[test]
    fn the_context_is_what_transformers_passes() {
        let m = hi();
        let special = SpecialTokens {
            bos: Some("<s>".into()),
            eos: Some("</s>".into()),
            ..SpecialTokens::default()
        };
        let kwargs = json!({"enable_thinking": false, "eos_token": "<|im_end|>"});
        let chat = Chat {
            special: Some(&special),
            kwargs: kwargs.as_object(),
            ..Chat::new(&m, &[])
        };
        assert_eq!(
            chat.context(),
            json!({"bos_token": "<s>", "eos_token": "<|im_end|>", "enable_thinking": false,
                   "messages": [{"role": "user", "content": "hi"}], "tools": null,
                   "documents": null, "add_generation_prompt": true})
        );
        let t = "{{ bos_token }}{{ unk_token is defined }}{{ enable_thinking }}{{ tools }}";
        assert_eq!(render(Some(t), &chat).unwrap(), "<s>FalseFalseNone");
    }

    /// A user turn.
    fn hi() -> Vec<Message> {
        use crate::call::{Role, Turn};
        use crate::wire::openai::{Reader, messages};
        messages(None, &[Turn::text(Role::User, "hi")], Reader::Template)
    }

    #[test]
    fn a_template_that_loops_forever_runs_out_of_fuel() {
        // 10^10 steps that write nothing: without fuel, the worker never comes back.
        let t = "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}";
        let started = std::time::Instant::now();
        let e = render(Some(t), &Chat::new(&hi(), &[]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("chat template ran too long"), "{e}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn a_template_that_writes_too_much_is_stopped_at_the_cap() {
        // 64 × 100 MB: without a cap, the process aborts allocating 6.4 GB.
        let t = "{% for i in range(64) %}{{ 'x' * 100000000 }}{% endfor %}";
        let e = render(Some(t), &Chat::new(&hi(), &[]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("chat template produced more than"), "{e}");
        // Written into a block rather than out: counted all the same.
        let t = "{% set s %}{% for i in range(64) %}{{ 'x' * (100000000 - i) }}{% endfor %}{% endset %}";
        let e = render(Some(t), &Chat::new(&hi(), &[]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("chat template produced more than"), "{e}");
        // Raw text, many times over.
        let t = format!(
            "{{% for i in range(100000) %}}{}{{% endfor %}}",
            "y".repeat(100_000)
        );
        let e = render(Some(&t), &Chat::new(&hi(), &[]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("chat template produced more than"), "{e}");
    }

    #[test]
    fn a_template_whose_steps_are_slow_is_stopped_by_the_clock() {
        // Few steps, each repeating a string to 10 MB: fuel alone lets it run for long.
        static LATE: AtomicBool = AtomicBool::new(false);
        let t = "{% for a in range(100000) %}{% set x = 'x' * (10000000 - a) %}{% endfor %}";
        let limits = Limits {
            fuel: 10_000,
            output: 1 << 20,
            deadline: Duration::from_millis(100),
        };
        let started = std::time::Instant::now();
        let e = guarded(t, json!({}), limits, &LATE)
            .unwrap_err()
            .to_string();
        assert!(e.contains("chat template ran too long (over 100ms)"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5));
        // While it runs on, no other rendering starts …
        let e = guarded("hi", json!({}), limits, &LATE)
            .unwrap_err()
            .to_string();
        assert!(e.contains("still running from an earlier call"), "{e}");
        // … and once its fuel ends it, they do again.
        while LATE.load(Ordering::Acquire) {
            assert!(started.elapsed() < Duration::from_secs(120), "never ended");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(guarded("hi", json!({}), limits, &LATE).unwrap(), "hi");
    }

    /// A job for the renderer's process: `template` with `context`, within the base limits.
    fn job(template: &str, context: &serde_json::Value) -> Vec<u8> {
        serde_json::to_vec(&Job {
            template,
            context,
            fuel: FUEL,
            output: OUTPUT,
        })
        .unwrap()
    }

    #[test]
    fn the_renderer_answers_each_job_in_turn_until_its_input_ends() {
        // Two jobs and something that is not one, framed one after the other …
        let context = json!({"name": "x"});
        let mut input = Vec::new();
        write_frame(&mut input, &job("hi {{ name }}", &context)).unwrap();
        write_frame(&mut input, &job("{{ nope(", &context)).unwrap();
        write_frame(&mut input, b"not a job").unwrap();
        let mut output = Vec::new();
        serve(&mut input.as_slice(), &mut output).unwrap();
        // … are answered in order, each reply a frame; the end of the input ends the serving.
        let mut replies = output.as_slice();
        let mut next = || {
            let frame = read_frame(&mut replies, 1 << 20).unwrap().unwrap();
            serde_json::from_slice::<Reply>(&frame).unwrap()
        };
        assert!(matches!(next(), Reply::Ok(text) if text == "hi x"));
        assert!(matches!(next(), Reply::Render(_)));
        assert!(matches!(next(), Reply::Failed));
        assert!(read_frame(&mut replies, 1 << 20).unwrap().is_none());
    }

    #[test]
    fn a_frame_over_its_cap_or_cut_short_is_refused() {
        let mut bytes = Vec::new();
        write_frame(&mut bytes, &[7; 100]).unwrap();
        assert_eq!(
            read_frame(&mut bytes.as_slice(), 100).unwrap(),
            Some(vec![7; 100])
        );
        // Longer than the reader takes: refused before it is read.
        assert!(read_frame(&mut bytes.as_slice(), 99).is_err());
        // The body cut short fails; no length at all (or part of one) is the end.
        assert!(read_frame(&mut &bytes[..50], 100).is_err());
        assert!(read_frame(&mut &bytes[..3], 100).unwrap().is_none());
        assert!(read_frame(&mut &bytes[..0], 100).unwrap().is_none());
    }

    #[test]
    fn long_conversations_render_within_the_limits() {
        use crate::call::{Role, Turn};
        use crate::wire::openai::{Reader, messages};
        let turns: Vec<Turn> = (0..2_000)
            .map(|i| {
                Turn::text(
                    if i % 2 == 0 {
                        Role::User
                    } else {
                        Role::Assistant
                    },
                    "word ".repeat(50),
                )
            })
            .collect();
        let m = messages(Some("sys"), &turns, Reader::Template);
        let prompt = render(None, &Chat::new(&m, &[])).unwrap();
        assert!(prompt.len() > 2_000 * 250, "{}", prompt.len());
    }
}
