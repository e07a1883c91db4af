//! The integration suite: one binary, one module per topic. Every test drives the real
//! `fencepost` binary as separate processes through the `harness` builder, but for
//! `structure`'s, which read the sources themselves; `api` also calls the library in this
//! process, as a program would.

mod harness;
mod support;

mod acknowledged;
mod api;
mod conventions;
mod crash;
mod documents;
mod failover;
mod hosts;
mod inputs;
mod leases;
mod mirror_edges;
mod mirror_service;
mod mirrors;
mod model;
mod model_tree;
mod operator;
mod package;
mod partition;
mod paths;
mod pg_support;
mod pooler;
mod powerloss;
mod readme;
mod reports;
mod reproduce;
mod roles;
mod roots;
mod secrets;
mod shapes;
mod sink;
mod store_crash;
mod store_environment;
mod store_inputs;
mod store_statements;
mod store_torture;
mod stores;
mod strace;
mod structure;
mod sync_commit;
mod tls;
mod torture;
mod trees;
mod trees_stores;
mod versions;
mod walls;
