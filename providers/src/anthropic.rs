//! Stub: filled in by the next commit.

use http::HeaderMap;

use crate::{AnswerOpts, ChatRequest, ChunkWriter, Completion, NativeRequest, Out, Target, TranslateError, Transcoder, UpstreamError};

pub(crate) fn build(_target: &Target<'_>, _req: &ChatRequest, _stream: bool) -> Result<NativeRequest, TranslateError> {
    Err(TranslateError::unsupported("protocol", "not implemented yet"))
}

pub(crate) fn parse(_target: &Target<'_>, _body: &[u8], _opts: &AnswerOpts) -> Result<Completion, UpstreamError> {
    Err(UpstreamError::malformed(200, "not implemented yet"))
}

pub(crate) fn classify(status: u16, headers: &HeaderMap, body: &[u8], now_unix_ms: u64) -> UpstreamError {
    crate::generic_error(status, headers, body, now_unix_ms)
}

pub(crate) struct StreamTranscoder(ChunkWriter);

impl StreamTranscoder {
    pub(crate) fn new(opts: AnswerOpts) -> Self {
        Self(ChunkWriter::new(&opts))
    }
}

impl Transcoder for StreamTranscoder {
    fn feed(&mut self, _bytes: &[u8]) -> Vec<Out> {
        Vec::new()
    }
    fn finish(&mut self) -> Vec<Out> {
        let mut out = Vec::new();
        self.0.error(UpstreamError::malformed(200, "not implemented yet"), &mut out);
        out
    }
}
