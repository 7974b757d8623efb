//! agentctx_fast's core: turn segmentation, tool-protocol validation, window selection and
//! heuristic token counting. No PyO3 here; `py/` (feature `python`) is the only binding.

pub mod bpe;
pub mod decode;
pub mod error;
pub mod model;
pub mod protocol;
pub mod reach;
pub mod read;
pub mod tokens;
pub mod turns;
pub mod window;

#[cfg(feature = "python")]
mod py;

#[cfg(test)]
mod golden_tests;
