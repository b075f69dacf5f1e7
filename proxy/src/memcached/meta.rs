//! The meta protocol's parser (`mn` so far; `mg`/`ms`/`md`/`ma` are answered `ERROR`, see
//! docs/memcached.md). Pure.

use super::parse::Request;

/// A meta request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetaRequest {
    /// `mn`: answered `MN` in order (a pipeline's end marker).
    Noop,
}

/// What [`parse`] found.
pub enum Outcome {
    Incomplete,
    Ready(Request, usize),
}

/// A meta command whose tokens are `t` (its line ends at `line_end` in `buf`).
pub fn parse(t: &[&[u8]], _buf: &[u8], line_end: usize, _item_max: usize) -> Outcome {
    let req = match t[0] {
        b"mn" => Request::Meta(MetaRequest::Noop),
        _ => Request::Reject {
            reply: super::parse::ERROR,
            swallow: 0,
            delete: None,
            noreply: false,
        },
    };
    Outcome::Ready(req, line_end)
}
