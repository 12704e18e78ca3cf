//! The request limits every route shares: the body's size and the header
//! section's size and field count. The middleware that enforces them is in
//! [`crate::middleware`]; the extractors of [`crate::extract`] cut a chunked
//! body at the same [`BODY_LIMIT`].

/// Largest request body accepted, in bytes.
pub const BODY_LIMIT: usize = 1024 * 1024;

/// Largest header section accepted, in bytes: 64 KiB, counted as each
/// field's name and value plus 4 bytes (`: ` and the line end), as on the
/// wire. A larger one answers `431 request_header_fields_too_large` in the
/// JSON error shape (hyper itself buffers up to [`crate::serve::HEAD_BUFFER_BYTES`]).
pub const HEADER_LIMIT_BYTES: usize = 64 * 1024;

/// Most header fields accepted in one request; more answer
/// `431 request_header_fields_too_large` like [`HEADER_LIMIT_BYTES`].
pub const HEADER_FIELDS_LIMIT: usize = 100;
