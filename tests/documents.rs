//! Documents as files people publish.
