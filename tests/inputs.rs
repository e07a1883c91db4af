//! Bad inputs: exit 2, one clear line, nothing changed.
