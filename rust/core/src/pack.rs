//! Handoff packing (filled in by the packing work).
