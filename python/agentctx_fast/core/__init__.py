"""The core: messages, turns, the tool protocol, tokens and the window, on the Rust
backend or the pure-Python reference."""
