//! The hasher of svc's in-memory caches and indexes on the request path (tokens, identities,
//! grants, samples, schemas, the registry snapshot's index by table id, the shapes of traces'
//! root spans, the route templates of metrics, the open connections by peer address).
//!
//! foldhash, seeded at random per cache. The standard library's SipHash cost a cached sample
//! about two thousand instructions over the token and the cache keys, and what it guards
//! against, keys an attacker picks to collide, does not apply: the keys are tokens whose
//! signature was checked, ids of users, groups and registered tables, and the router's own
//! patterns. A peer's address is partly the caller's choice (its port), but foldhash's random
//! seed keeps collisions from being planned offline.

/// The hasher of a cache or index: `CacheHasher::default()` seeds one.
pub type CacheHasher = foldhash::fast::RandomState;
