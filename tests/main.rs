//! The integration suite: one binary, one module per topic. Every test drives the real
//! `fencepost` binary as separate processes through the `harness` builder.

mod harness;

mod crash;
mod documents;
mod inputs;
mod leases;
mod operator;
mod paths;
mod powerloss;
mod reproduce;
mod sink;
mod strace;
mod torture;
