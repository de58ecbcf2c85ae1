//! The scheduler with a fake model: admission, batching, chunked prompts, the shared cache,
//! drafts and their rollback, each seen in the batches the model was given.

use super::*;
use crate::local::prompt_cache::{RestoreError, SaveError, Saved};
use llama_cpp_2::DecodeError;
use llguidance::api::TopLevelGrammar;
use std::collections::BTreeMap;
use tokio::sync::oneshot::{Receiver, error::TryRecvError};

const END: LlamaToken = LlamaToken(99);
const VOCABULARY: usize = 100;

/// The fake model's next token after a sequence: counts on, 0 to 9 and round again.
fn counting(seq: &[LlamaToken]) -> LlamaToken {
    LlamaToken(seq.last().map_or(0, |t| (t.0 + 1) % 10))
}

/// Counts on, but writes 5 after every seventh token: a repeat of the sequence is a good
/// guess most of the time, not always.
fn counting_with_a_twist(seq: &[LlamaToken]) -> LlamaToken {
    if seq.len().is_multiple_of(7) {
        LlamaToken(5)
    } else {
        counting(seq)
    }
}

/// A model whose next token is a function of its sequence so far, and whose cache checks that
/// each token is written at the next position of its sequence, within the cells.
struct Fake {
    cells: usize,
    kv: BTreeMap<i32, Vec<LlamaToken>>,
    /// The next token at each place of the last batch whose logits were made.
    next: Vec<Option<LlamaToken>>,
    logits: Vec<f32>,
    rule: fn(&[LlamaToken]) -> LlamaToken,
    batches: Vec<Vec<Place>>,
    resized: Vec<usize>,
    /// The next decode fails (as a backend's might).
    failing: bool,
    /// A draft model's rule, when the fake has one.
    drafter: Option<fn(&[LlamaToken]) -> LlamaToken>,
    /// The media read, as (sequence, start, positions), each in a step of its own.
    media: Vec<(i32, usize, usize)>,
    /// The next media read fails.
    media_fails: bool,
    /// Cells each sequence's media take beyond their positions, by where the media end.
    wide: BTreeMap<i32, Vec<(usize, usize)>>,
}

impl Fake {
    fn new(cells: usize, rule: fn(&[LlamaToken]) -> LlamaToken) -> Fake {
        Fake {
            cells,
            kv: BTreeMap::new(),
            next: Vec::new(),
            logits: Vec::new(),
            rule,
            batches: Vec::new(),
            resized: Vec::new(),
            failing: false,
            drafter: None,
            media: Vec::new(),
            media_fails: false,
            wide: BTreeMap::new(),
        }
    }
}

/// The fake's sampler: greedy, so it holds nothing.
struct Greedy;

impl Decoder for Fake {
    type Sampler = Greedy;

    fn decode(&mut self, batch: &[Place]) -> Result<(), DecodeError> {
        let wide: usize = self.wide.values().flatten().map(|(_, w)| w).sum();
        let used: usize = self.kv.values().map(Vec::len).sum::<usize>() + wide;
        if std::mem::take(&mut self.failing) {
            return Err(DecodeError::Unknown(-3));
        }
        if used + batch.len() > self.cells {
            return Err(DecodeError::NoKvCacheSlot);
        }
        self.next = vec![None; batch.len()];
        for (at, place) in batch.iter().enumerate() {
            let seq = self.kv.entry(place.seq).or_default();
            assert_eq!(place.position, seq.len(), "{place:?} out of order");
            seq.push(place.token);
            if place.logits {
                self.next[at] = Some((self.rule)(seq));
            }
        }
        self.batches.push(batch.to_vec());
        Ok(())
    }

    fn cut(&mut self, seq: i32, from: usize) -> bool {
        self.kv.entry(seq).or_default().truncate(from);
        self.wide
            .entry(seq)
            .or_default()
            .retain(|(end, _)| *end <= from);
        true
    }

    fn media(&mut self, seq: i32, media: &Media) -> Result<(), String> {
        if std::mem::take(&mut self.media_fails) {
            return Err("the encoder failed".into());
        }
        let cached = self.kv.entry(seq).or_default();
        assert_eq!(media.start, cached.len(), "{media:?} out of order");
        // What the media's last position makes the model write next: 7.
        cached.extend(std::iter::repeat_n(LlamaToken(6), media.len));
        let end = media.start + media.len;
        self.wide.entry(seq).or_default().push((end, media.wide()));
        self.media.push((seq, media.start, media.len));
        Ok(())
    }

    fn sample(&mut self, _: &mut Greedy, at: usize) -> LlamaToken {
        self.next[at].expect("a sample where no logits were made")
    }

    fn accept(&mut self, _: &mut Greedy, _: LlamaToken) {}

    fn logits(&self, at: usize) -> &[f32] {
        // Not kept per place: tests that read them compute them in `logits_at`.
        let _ = at;
        &self.logits
    }

    fn is_end(&self, token: LlamaToken) -> bool {
        token == END
    }

    fn piece(&self, token: LlamaToken, _: &[LlamaToken]) -> Vec<u8> {
        format!("{} ", token.0).into_bytes()
    }

    fn constrained(&self, _: TopLevelGrammar, _: &str, _: &Params) -> Result<Greedy, EngineError> {
        Ok(Greedy)
    }

    fn has_drafter(&self) -> bool {
        self.drafter.is_some()
    }

    fn draft(&mut self, _: i32, tokens: &[LlamaToken], most: usize) -> Vec<LlamaToken> {
        let Some(rule) = self.drafter else {
            return Vec::new();
        };
        let mut seq = tokens.to_vec();
        for _ in 0..most {
            let next = rule(&seq);
            seq.push(next);
        }
        seq.split_off(tokens.len())
    }

    fn cells(&self) -> usize {
        self.cells
    }

    fn resize(&mut self, cells: usize, keep: &[i32]) -> Result<Vec<i32>, EngineError> {
        self.kv.retain(|seq, _| keep.contains(seq));
        self.wide.retain(|seq, _| keep.contains(seq));
        self.cells = cells;
        self.resized.push(cells);
        Ok(Vec::new())
    }

    fn save(
        &mut self,
        _: &DiskCache,
        _: i32,
        _: &[LlamaToken],
        _: usize,
    ) -> Result<u64, SaveError> {
        Err(SaveError::Write(std::io::Error::other("no disk here")))
    }

    fn restore(
        &mut self,
        _: &DiskCache,
        _: i32,
        _: &Saved,
        _: &[LlamaToken],
    ) -> Result<Vec<LlamaToken>, RestoreError> {
        Err(RestoreError::Damaged)
    }
}

struct Quiet;

impl Reader for Quiet {
    fn read(&mut self, _: usize, _: &str) {}
    fn end(self: Box<Self>, _: usize) -> Option<crate::local::format::Answer> {
        None
    }
}

type Answer = Receiver<Result<Output, LocalError>>;

fn layout(slots: usize, context: usize, most_cells: usize) -> Layout {
    Layout {
        slots,
        step: 64,
        context,
        most_cells,
        cuts: true,
        on_cpu: true,
    }
}

fn slots(layout: Layout, fake: Fake) -> Slots<Fake> {
    Slots::new(fake, layout, Arc::new(Counters::default()), None)
}

fn call(prompt: &[i32], budget: usize) -> (Call<Greedy>, Answer) {
    asking(prompt, budget, Params::default())
}

fn asking(prompt: &[i32], budget: usize, params: Params) -> (Call<Greedy>, Answer) {
    let (reply, answer) = tokio::sync::oneshot::channel();
    let call = Call {
        prompt: prompt.iter().map(|t| LlamaToken(*t)).collect(),
        media: Vec::new(),
        params,
        budget,
        sampler: Greedy,
        reader: Box::new(Quiet),
        shown: Vec::new(),
        in_reasoning: false,
        think: None,
        lazy: None,
        reply,
    };
    (call, answer)
}

/// Places a call, which must go in at once.
fn admit(slots: &mut Slots<Fake>, prompt: &[i32], budget: usize) -> Answer {
    let (call, answer) = call(prompt, budget);
    assert!(slots.place(call).is_none(), "the call had to wait");
    answer
}

/// Steps until the slots are idle (100 steps at most).
fn run(slots: &mut Slots<Fake>) {
    for _ in 0..100 {
        if slots.is_idle() {
            return;
        }
        slots.step();
    }
    panic!("the slots did not finish");
}

fn answer(mut answer: Answer) -> Output {
    answer.try_recv().expect("answered").expect("no error")
}

/// The sequence of the (one) busy slot.
fn busy_seq(slots: &Slots<Fake>) -> i32 {
    let busy = slots.slots.iter().find(|s| s.active.is_some());
    busy.expect("a busy slot").seq
}

/// The places of `seq` in a batch.
fn of(batch: &[Place], seq: i32) -> usize {
    batch.iter().filter(|p| p.seq == seq).count()
}

#[test]
fn every_running_sequence_advances_in_each_step() {
    let mut slots = slots(layout(3, 256, 768), Fake::new(768, counting));
    let answers = [
        admit(&mut slots, &[1, 2, 3], 5),
        admit(&mut slots, &[6, 7], 5),
        admit(&mut slots, &[0], 5),
    ];
    run(&mut slots);
    let texts: Vec<String> = answers.into_iter().map(|a| answer(a).text).collect();
    assert_eq!(texts, ["4 5 6 7 8 ", "8 9 0 1 2 ", "1 2 3 4 5 "]);
    let batches = &slots.decoder.batches;
    // The prompts in one step, then one token of each answer a step: three answers of five
    // tokens in five steps, not fifteen.
    assert_eq!(batches.len(), 5, "{batches:?}");
    assert_eq!(batches[0].len(), 6);
    for batch in &batches[1..] {
        assert!((0..3).all(|seq| of(batch, seq) == 1), "{batch:?}");
    }
}

#[test]
fn a_long_prompt_is_read_in_chunks_beside_an_answer_that_keeps_going() {
    let mut slots = slots(layout(2, 512, 1024), Fake::new(1024, counting));
    let first = admit(&mut slots, &[1], 30);
    let answering = busy_seq(&slots);
    slots.step();
    let long: Vec<i32> = (0..300).map(|i| i % 10).collect();
    let second = admit(&mut slots, &long, 3);
    let before = slots.decoder.batches.len();
    run(&mut slots);
    assert_eq!(answer(second).text, "0 1 2 ");
    assert_eq!(answer(first).completion_tokens, 30);
    let reading: Vec<&Vec<Place>> = slots.decoder.batches[before..]
        .iter()
        .filter(|b| of(b, 1 - answering) > 1)
        .collect();
    // 300 tokens in steps of 64 at most, the answer's next token in each of them.
    assert_eq!(reading.len(), 5, "{reading:?}");
    for batch in reading {
        assert!(batch.len() <= 64, "{}", batch.len());
        assert_eq!(of(batch, answering), 1, "the answer waited for the prompt");
    }
}

#[test]
fn a_prompt_that_shares_a_cached_prefix_reads_only_the_rest() {
    let mut slots = slots(layout(1, 256, 256), Fake::new(256, counting));
    let prompt: Vec<i32> = (0..20).map(|i| (i * 3) % 10).collect();
    let first = admit(&mut slots, &prompt, 2);
    run(&mut slots);
    assert_eq!(answer(first).cached_tokens, 0);
    let read = slots.decoder.batches.len();
    let mut longer = prompt.clone();
    longer.extend([4, 4, 4, 4, 4]);
    let second = admit(&mut slots, &longer, 2);
    run(&mut slots);
    let second = answer(second);
    assert_eq!((second.prompt_tokens, second.cached_tokens), (25, 20));
    let positions: Vec<usize> = (slots.decoder.batches[read].iter())
        .map(|p| p.position)
        .collect();
    assert_eq!(positions, (20..25).collect::<Vec<_>>());
}

/// One answer of 60 tokens after `prompt`, drafting as `speculative` says.
struct Drafted {
    text: String,
    drafted: u64,
    accepted: u64,
    steps: usize,
}

fn drafted_answer(prompt: &[i32], speculative: Speculative) -> Drafted {
    drafted_by(prompt, speculative, None)
}

fn drafted_by(
    prompt: &[i32],
    speculative: Speculative,
    drafter: Option<fn(&[LlamaToken]) -> LlamaToken>,
) -> Drafted {
    let mut fake = Fake::new(512, counting_with_a_twist);
    fake.drafter = drafter;
    let slots = slots(layout(1, 512, 512), fake);
    let mut slots = slots.speculating(speculative);
    let reply = admit(&mut slots, prompt, 60);
    run(&mut slots);
    let c = &slots.counters;
    Drafted {
        text: answer(reply).text,
        drafted: c.drafted.load(Ordering::Relaxed),
        accepted: c.accepted.load(Ordering::Relaxed),
        steps: slots.decoder.batches.len(),
    }
}

#[test]
fn drafts_keep_the_greedy_answer_and_are_taken_back_when_not_kept() {
    let prompt: Vec<i32> = (0..40).map(|i| i % 10).collect();
    let plain = drafted_answer(&prompt, Speculative::None);
    let drafted = drafted_answer(&prompt, Speculative::Ngram);
    assert_eq!((plain.drafted, plain.accepted), (0, 0));
    same_answer_in_fewer_steps(&drafted, &plain);
}

/// The same answer: a draft stays only where the model's own sample is that token, and one
/// that was not kept left the cache (the fake checks every position); some drafts were kept,
/// not all, and the answer took fewer than half the steps.
fn same_answer_in_fewer_steps(drafted: &Drafted, plain: &Drafted) {
    assert_eq!(drafted.text, plain.text);
    let (kept, of) = (drafted.accepted, drafted.drafted);
    assert!(kept > 0 && kept < of, "{kept} of {of}");
    let steps = (drafted.steps, plain.steps);
    assert!(steps.0 < steps.1 / 2, "{steps:?}");
}

#[test]
fn a_draft_models_drafts_keep_the_greedy_answer_in_the_place_of_ngrams() {
    let prompt = [3, 1, 4];
    let plain = drafted_answer(&prompt, Speculative::None);
    // A draft model that counts on where the model writes a 5 at every seventh token (and
    // drafts with or without `--speculative ngram`).
    let drafted = drafted_by(&prompt, Speculative::None, Some(counting));
    let asked_ngrams_too = drafted_by(&prompt, Speculative::Ngram, Some(counting));
    assert_eq!(asked_ngrams_too.drafted, drafted.drafted);
    same_answer_in_fewer_steps(&drafted, &plain);
}

#[test]
fn only_steps_that_read_a_prompt_size_the_next_one() {
    let wide = Layout {
        step: 512,
        ..layout(8, 256, 2048)
    };
    let mut slots = slots(wide, Fake::new(2048, counting));
    assert_eq!(slots.room(), 64);
    // Eight answers' next tokens, 10 ms each on the clock: the weights read once, which says
    // nothing of how fast a prompt is read.
    slots.timed(0, 8, 0.08);
    assert_eq!(slots.room(), 64);
    // 56 prompt tokens beside them at 1 ms a token: 0.3 s holds 300, in tiles of 64.
    slots.timed(56, 64, 0.064);
    assert_eq!(slots.room(), 256);
}

#[test]
fn a_cancelled_call_frees_its_slot_within_a_step() {
    let mut slots = slots(layout(1, 256, 256), Fake::new(256, counting));
    let cancelled = admit(&mut slots, &[1, 2], 200);
    slots.step();
    slots.step();
    assert!(!slots.has_free_slot());
    drop(cancelled);
    slots.step();
    assert!(slots.has_free_slot());
    let next = admit(&mut slots, &[3], 2);
    run(&mut slots);
    assert_eq!(answer(next).text, "4 5 ");
}

#[test]
fn a_free_slots_cache_gives_way_when_the_shared_cache_fills() {
    let mut slots = slots(layout(2, 64, 64), Fake::new(64, counting));
    let first: Vec<i32> = (0..30).map(|i| i % 10).collect();
    let reply = admit(&mut slots, &first, 4);
    let seq = busy_seq(&slots);
    run(&mut slots);
    answer(reply);
    let cached = |slots: &Slots<Fake>, seq: i32| slots.slots[seq as usize].cached.len();
    assert_eq!(cached(&slots, seq), 33);
    // 40 cells more do not fit beside the first call's 33: its free slot's cache gives way.
    let second: Vec<i32> = (0..40).map(|i| (i * 7 + 3) % 10).collect();
    let reply = admit(&mut slots, &second, 4);
    run(&mut slots);
    assert_eq!(answer(reply).text, "7 8 9 0 ");
    assert_eq!((cached(&slots, seq), cached(&slots, 1 - seq)), (0, 43));
    assert!(slots.decoder.kv[&seq].is_empty());
}

#[test]
fn a_call_waits_while_the_calls_in_progress_hold_the_cache() {
    let mut slots = slots(layout(2, 64, 64), Fake::new(64, counting));
    let prompt: Vec<i32> = (0..30).map(|i| i % 10).collect();
    let first = admit(&mut slots, &prompt, 20);
    // 50 cells held by the first call: 34 more do not fit.
    let (waiting, second) = call(&prompt, 4);
    let waiting = slots.place(waiting).expect("the call waits");
    let mut waiting = Some(waiting);
    for _ in 0..100 {
        if let Some(call) = waiting.take() {
            waiting = slots.place(call);
        }
        if slots.is_idle() && waiting.is_none() {
            break;
        }
        slots.step();
    }
    assert_eq!(answer(first).completion_tokens, 20);
    let second = answer(second);
    assert_eq!(second.text, "0 1 2 3 ");
    // It went in once the first was answered, and found its prompt in the first one's cache.
    assert_eq!(second.cached_tokens, 29);
}

#[test]
fn the_cache_grows_while_calls_run_and_keeps_their_caches() {
    let mut slots = slots(layout(2, 256, 512), Fake::new(32, counting));
    let first = admit(&mut slots, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 0], 30);
    assert_eq!(slots.decoder.resized, [64]);
    for _ in 0..5 {
        slots.step();
    }
    let prompt: Vec<i32> = (0..40).map(|i| (i * 3) % 10).collect();
    let second = admit(&mut slots, &prompt, 10);
    assert_eq!(slots.decoder.resized, [64, 128]);
    run(&mut slots);
    // The first call's cache was carried: its answer goes on where it was (the fake checks
    // each position).
    let first = answer(first);
    assert_eq!(first.completion_tokens, 30);
    assert!(
        first.text.starts_with("1 2 3 4 5 6 7 8 9 0 1 "),
        "{}",
        first.text
    );
    assert_eq!(answer(second).text, "8 9 0 1 2 3 4 5 6 7 ");
}

#[test]
fn an_answer_past_its_room_grows_the_cache_rather_than_end() {
    // Given its prompt and 4,096 tokens of room in a cache of 4,200 cells.
    let mut slots = slots(layout(1, 8192, 16384), Fake::new(4200, counting));
    let reply = admit(&mut slots, &[1, 2, 3], 6000);
    assert!(slots.decoder.resized.is_empty());
    for _ in 0..7000 {
        if slots.is_idle() {
            break;
        }
        slots.step();
    }
    let output = answer(reply);
    assert_eq!(
        (output.completion_tokens, output.finish),
        (6000, Finish::MaxTokens)
    );
    assert_eq!(slots.decoder.resized, [8400]);
}

#[test]
fn an_answer_ends_at_its_sequences_end_or_at_a_stop() {
    let mut slots = slots(layout(1, 16, 16), Fake::new(16, counting));
    let long = admit(&mut slots, &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9], 100);
    run(&mut slots);
    let long = answer(long);
    assert_eq!(
        (long.completion_tokens, long.finish),
        (6, Finish::MaxTokens)
    );
    let stop = vec!["7 ".to_owned()];
    let (call, reply) = asking(
        &[3],
        10,
        Params {
            stop,
            ..Params::default()
        },
    );
    assert!(slots.place(call).is_none());
    run(&mut slots);
    let stopped = answer(reply);
    assert_eq!(stopped.text, "4 5 6 ");
    assert_eq!(stopped.finish, Finish::StopSequence(Some("7 ".to_owned())));
}

#[test]
fn a_call_that_asks_for_them_gets_each_tokens_log_probability() {
    let mut fake = Fake::new(64, counting);
    fake.logits = (0..VOCABULARY)
        .map(|t| if t == 4 { 3.0 } else { 0.0 })
        .collect();
    let mut slots = slots(layout(1, 64, 64), fake);
    let params = Params {
        logprobs: Some(2),
        ..Params::default()
    };
    let (asked, reply) = asking(&[3], 3, params);
    assert!(slots.place(asked).is_none());
    run(&mut slots);
    let output = answer(reply);
    let tokens: Vec<&str> = output.logprobs.iter().map(|l| l.token.as_str()).collect();
    assert_eq!(tokens, ["4 ", "5 ", "6 "]);
    let first = &output.logprobs[0];
    assert_eq!(first.top.len(), 2);
    assert_eq!(first.top[0].token, "4 ");
    // e^3 against e^0 for each of the 99 others.
    let likely = (3.0f64.exp() / (3.0f64.exp() + 99.0)).ln();
    assert!((first.logprob - likely).abs() < 1e-6, "{}", first.logprob);
    let unlikely = -(3.0f64.exp() + 99.0).ln();
    assert!((output.logprobs[1].logprob - unlikely).abs() < 1e-6);
    assert_eq!(output.logprobs[1].top[0].token, "4 ");
    // Not asked: none.
    let (call, reply) = call(&[3], 2);
    assert!(slots.place(call).is_none());
    run(&mut slots);
    assert!(answer(reply).logprobs.is_empty());
}

#[test]
fn a_failed_step_fails_the_calls_in_it_and_forgets_their_caches() {
    let mut slots = slots(layout(1, 64, 64), Fake::new(64, counting));
    let reply = admit(&mut slots, &[1, 2, 3], 5);
    slots.step();
    slots.decoder.failing = true;
    slots.step();
    let mut reply = reply;
    assert!(matches!(reply.try_recv(), Ok(Err(LocalError::Engine(_)))));
    assert!(slots.is_idle() && slots.slots[0].cached.is_empty());
    assert!(slots.decoder.kv.values().all(Vec::is_empty));
    assert!(matches!(reply.try_recv(), Err(TryRecvError::Closed)));
    // The slot takes the next call.
    let next = admit(&mut slots, &[1, 2, 3], 2);
    run(&mut slots);
    assert_eq!(answer(next).text, "4 5 ");
}

/// A call whose prompt is `before`, then media of `len` positions of content `id`, then
/// `after`.
fn with_media(
    before: &[i32],
    id: u8,
    len: usize,
    after: &[i32],
    budget: usize,
) -> (Call<Greedy>, Answer) {
    let (mut call, answer) = call(before, budget);
    let start = call.prompt.len();
    call.prompt.extend(media_tokens(&[id; 32], len));
    call.prompt.extend(after.iter().map(|t| LlamaToken(*t)));
    call.media.push(Media {
        start,
        len,
        cells: len,
        chunks: None,
    });
    (call, answer)
}

fn place(slots: &mut Slots<Fake>, (call, answer): (Call<Greedy>, Answer)) -> Answer {
    assert!(slots.place(call).is_none(), "the call had to wait");
    answer
}

#[test]
fn media_is_read_whole_in_a_step_of_its_own_between_the_prompts_text() {
    let mut slots = slots(layout(1, 512, 512), Fake::new(512, counting));
    // 100 tokens of text first: read in two chunks, then the media, then the rest.
    let before: Vec<i32> = (0..100).map(|i| i % 10).collect();
    let reply = place(&mut slots, with_media(&before, 1, 40, &[4, 5], 3));
    run(&mut slots);
    let seq = slots.slots[0].seq;
    assert_eq!(slots.decoder.media, vec![(seq, 100, 40)]);
    for place in slots.decoder.batches.iter().flatten() {
        assert!(
            place.token.0 >= 0,
            "a media token was decoded as text: {place:?}"
        );
        assert!(
            !(100..140).contains(&place.position),
            "{place:?} is the media's"
        );
    }
    let out = answer(reply);
    assert_eq!((out.text.as_str(), out.prompt_tokens), ("6 7 8 ", 142));
    // The cache holds the media's tokens where it was read.
    let cached = &slots.slots[0].cached;
    assert_eq!(cached.get(100..140), Some(&media_tokens(&[1; 32], 40)[..]));
}

#[test]
fn a_second_turn_that_repeats_an_image_reuses_its_reading_and_another_image_is_read() {
    let mut slots = slots(layout(1, 512, 512), Fake::new(512, counting));
    let first = place(&mut slots, with_media(&[1, 2, 3], 1, 20, &[4], 2));
    run(&mut slots);
    assert_eq!(answer(first).cached_tokens, 0);
    // The same image, more text after it: only the text is read.
    let again = place(&mut slots, with_media(&[1, 2, 3], 1, 20, &[4, 5, 6, 7], 2));
    run(&mut slots);
    let again = answer(again);
    assert_eq!(slots.decoder.media.len(), 1, "the image was read again");
    assert_eq!((again.prompt_tokens, again.cached_tokens), (27, 25));
    // Another image in its place: the text before it is kept, the image read.
    let other = place(&mut slots, with_media(&[1, 2, 3], 2, 20, &[4, 5, 6, 7], 2));
    run(&mut slots);
    assert_eq!(answer(other).cached_tokens, 3);
    let seq = slots.slots[0].seq;
    assert_eq!(slots.decoder.media.last(), Some(&(seq, 3, 20)));
}

#[test]
fn a_cached_prefix_that_ends_inside_media_is_kept_only_up_to_the_media() {
    let mut slots = slots(layout(1, 512, 512), Fake::new(512, counting));
    let first = place(&mut slots, with_media(&[1, 2, 3], 1, 20, &[4], 2));
    run(&mut slots);
    answer(first);
    // Media whose first ten tokens are the first image's: a match of 13 tokens, inside it.
    let (mut call, reply) = with_media(&[1, 2, 3], 2, 20, &[4], 2);
    let shared = media_tokens(&[1; 32], 10);
    call.prompt.splice(3..13, shared);
    let reply = place(&mut slots, (call, reply));
    run(&mut slots);
    assert_eq!(answer(reply).cached_tokens, 3);
    let seq = slots.slots[0].seq;
    assert_eq!(slots.decoder.media, vec![(seq, 3, 20), (seq, 3, 20)]);
}

#[test]
fn media_that_cannot_be_read_ends_its_call_alone() {
    let mut slots = slots(layout(2, 256, 512), Fake::new(512, counting));
    let other = admit(&mut slots, &[1, 2, 3], 6);
    slots.step();
    slots.decoder.media_fails = true;
    let mut failed = place(&mut slots, with_media(&[1], 1, 10, &[2], 3));
    run(&mut slots);
    assert!(matches!(failed.try_recv(), Ok(Err(LocalError::Media(_)))));
    assert_eq!(answer(other).text, "4 5 6 7 8 9 ");
    // Its slot holds what was read before the media, not the media.
    assert!(
        slots
            .slots
            .iter()
            .all(|s| s.cached.iter().all(|t| t.0 >= 0))
    );
}

#[test]
fn drafts_never_propose_media_tokens() {
    let slots = slots(layout(1, 512, 512), Fake::new(512, counting));
    let mut slots = slots.speculating(Speculative::Ngram);
    // The answer counts 1, 2, 3, …: "1 2" was followed by media in the prompt.
    let reply = place(&mut slots, with_media(&[0, 1, 2], 1, 8, &[0], 12));
    run(&mut slots);
    assert_eq!(answer(reply).completion_tokens, 12);
    for place in slots.decoder.batches.iter().flatten() {
        assert!(place.token.0 >= 0, "a media token was drafted: {place:?}");
    }
}

#[test]
fn a_prompt_that_ends_with_media_is_refused_not_left_waiting() {
    let mut slots = slots(layout(1, 256, 256), Fake::new(256, counting));
    let mut reply = place(&mut slots, with_media(&[1, 2], 1, 6, &[], 3));
    assert!(matches!(reply.try_recv(), Ok(Err(LocalError::Media(_)))));
    assert!(slots.is_idle());
}

#[test]
fn media_that_takes_more_cells_than_positions_is_given_them() {
    // An image of 4 positions and 40 cells (M-RoPE's kind) in a cache of 64 cells.
    let mut slots = slots(layout(2, 64, 64), Fake::new(64, counting));
    let (mut wide, first) = with_media(&[1, 2], 1, 4, &[3], 2);
    if let Some(media) = wide.media.first_mut() {
        media.cells = 40;
    }
    let first = place(&mut slots, (wide, first));
    slots.step();
    // 20 more tokens do not fit beside its 43 cells and 2 of answer: the call waits, rather
    // than overflow the cache in a step.
    let (waiting, second) = call(&(0..20).collect::<Vec<_>>(), 2);
    let waiting = slots.place(waiting).expect("the call had to wait");
    run(&mut slots);
    assert_eq!(answer(first).text, "4 5 ");
    // Its slot's cache, image and all, gives way to it now.
    let second = place(&mut slots, (waiting, second));
    run(&mut slots);
    assert_eq!(answer(second).text, "0 1 ");
}
