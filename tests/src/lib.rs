//! Black-box tests for svc live in `tests/`; this library is intentionally empty.
