//! A multimodal projector (llama.cpp's `mmproj`, `--mmproj`): llama.cpp's multimodal library
//! (mtmd) encodes an image or a clip of audio into embeddings the model reads in place of
//! tokens. The server decodes the media itself ([`super::media`], bounded), so llama.cpp is
//! handed raw pixels and samples and never its own file decoders (which may run ffmpeg).

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::mtmd::{
    MtmdBitmap, MtmdContext, MtmdContextParams, MtmdInputChunks, MtmdInputText, mtmd_default_marker,
};
use std::ffi::CString;
use std::path::Path;
use std::sync::{Mutex, PoisonError};

/// A loaded projector, shared by the callers who tokenize their media with it and the worker
/// that encodes them (encoding is not thread-safe: one at a time).
pub struct Projector {
    context: Mutex<MtmdContext>,
    vision: bool,
    /// The sample rate audio is read at, when the projector takes audio.
    audio: Option<u32>,
}

/// Why a projector cannot be used, or a media part not read.
#[derive(Debug, thiserror::Error)]
pub enum ProjectorError {
    #[error("the projector file {0} does not exist")]
    Missing(String),
    #[error(
        "llama.cpp cannot load the projector {0} for this model (is it the projector (mmproj) \
         made for this model's architecture and size?)"
    )]
    Load(String),
    #[error("llama.cpp could not read the media into the prompt: {0}")]
    Tokenize(String),
    #[error("llama.cpp could not encode the media: {0}")]
    Encode(String),
}

/// What a projector file says it reads, (images, audio), from its metadata alone (no tensor is
/// read): `None` when it is no GGUF file (not fetched yet, say).
pub fn declared(path: &Path) -> Option<(bool, bool)> {
    if !path.is_file() {
        return None;
    }
    let gguf = llama_cpp_2::gguf::GgufContext::from_file(path)?;
    let has = |key: &str| gguf.find_key(key) >= 0;
    Some((
        has("clip.vision.image_size"),
        has("clip.audio.num_mel_bins"),
    ))
}

impl Projector {
    /// Loads the projector at `path` for `model`, encoding on `threads` CPU threads (or a GPU
    /// when `gpu`).
    pub fn load(
        path: &Path,
        model: &LlamaModel,
        threads: usize,
        gpu: bool,
    ) -> Result<Projector, ProjectorError> {
        let shown = || {
            path.file_name().map_or_else(
                || path.display().to_string(),
                |n| n.to_string_lossy().into(),
            )
        };
        if !path.is_file() {
            return Err(ProjectorError::Missing(shown()));
        }
        let params = MtmdContextParams {
            use_gpu: gpu,
            print_timings: false,
            n_threads: i32::try_from(threads).unwrap_or(1).max(1),
            media_marker: CString::new(mtmd_default_marker()).unwrap_or_default(),
            image_min_tokens: -1,
            image_max_tokens: -1,
        };
        let file = path.to_str().ok_or_else(|| ProjectorError::Load(shown()))?;
        let context = MtmdContext::init_from_file(file, model, &params)
            .map_err(|_| ProjectorError::Load(shown()))?;
        let vision = context.support_vision();
        let audio = context
            .support_audio()
            .then(|| context.get_audio_sample_rate())
            .flatten();
        Ok(Projector {
            context: Mutex::new(context),
            vision,
            audio,
        })
    }

    /// Whether it reads images.
    pub fn vision(&self) -> bool {
        self.vision
    }

    /// The sample rate it reads audio at, when it reads audio.
    pub fn audio_rate(&self) -> Option<u32> {
        self.audio
    }

    /// The chunks one image (`rgb`, `width` by `height`) becomes in a prompt, with whatever
    /// markers the model puts around an image, known by `id` (its content's hash) in llama.cpp.
    pub fn image(
        &self,
        width: u32,
        height: u32,
        rgb: &[u8],
        id: &str,
    ) -> Result<MtmdInputChunks, ProjectorError> {
        let bitmap = MtmdBitmap::from_image_data(width, height, rgb)
            .map_err(|e| ProjectorError::Tokenize(e.to_string()))?;
        self.chunks(bitmap, id)
    }

    /// The chunks one clip of audio (mono samples at [`Projector::audio_rate`]) becomes.
    pub fn audio(&self, samples: &[f32], id: &str) -> Result<MtmdInputChunks, ProjectorError> {
        let bitmap = MtmdBitmap::from_audio_data(samples)
            .map_err(|e| ProjectorError::Tokenize(e.to_string()))?;
        self.chunks(bitmap, id)
    }

    fn chunks(&self, mut bitmap: MtmdBitmap, id: &str) -> Result<MtmdInputChunks, ProjectorError> {
        bitmap
            .set_id(id)
            .map_err(|e| ProjectorError::Tokenize(e.to_string()))?;
        let text = MtmdInputText {
            text: mtmd_default_marker().to_owned(),
            add_special: false,
            parse_special: true,
        };
        // Tokenizing is thread-safe in llama.cpp, but the context is behind the encoder's lock.
        let context = self.context.lock().unwrap_or_else(PoisonError::into_inner);
        context
            .tokenize(text, &[&bitmap])
            .map_err(|e| ProjectorError::Tokenize(e.to_string()))
    }

    /// Encodes `chunks` and reads them into sequence `seq` of `llama` from `position` on, in
    /// batches of `batch`: the position after them.
    pub fn eval(
        &self,
        chunks: &MtmdInputChunks,
        llama: &mut LlamaContext<'_>,
        position: usize,
        seq: i32,
        batch: usize,
    ) -> Result<usize, ProjectorError> {
        let mut context = self.context.lock().unwrap_or_else(PoisonError::into_inner);
        let from = i32::try_from(position).map_err(|e| ProjectorError::Encode(e.to_string()))?;
        let batch = i32::try_from(batch).unwrap_or(i32::MAX);
        let next = chunks
            .eval_chunks(&mut context, llama, from, seq, batch, false)
            .map_err(|e| ProjectorError::Encode(e.to_string()))?;
        usize::try_from(next).map_err(|e| ProjectorError::Encode(e.to_string()))
    }
}
