//! The wire: every RESP encoder and decoder, client side and master side, in one place.
//!
//! - [`resp`]: the one line-end finder and the one integer parser every reader uses.
//! - [`request`]: client requests (multibulk and inline), decoded with size limits.
//! - [`reply`]: reply values and their RESP2/RESP3 encoding for clients.
//! - [`master`]: commands encoded for a master, and the decoder of the replies masters send.

pub mod master;
pub mod reply;
pub mod request;
pub mod resp;
