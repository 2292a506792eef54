//! The hasher of svc's in-memory caches and indexes on the request path (tokens, identities,
//! grants, samples, schemas, the registry snapshot's index by table id, the shapes of traces'
//! root spans).
//!
//! foldhash, seeded at random per cache. The standard library's SipHash cost a cached sample
//! about two thousand instructions over the token and the cache keys, and what it guards
//! against, keys an attacker picks to collide, does not apply: the keys are tokens whose
//! signature was checked, and ids of users, groups and registered tables. foldhash's random
//! seed still keeps collisions from being planned offline.

/// Builds the hasher of a cache: `Cache::builder().build_with_hasher(CacheHasher::default())`.
pub type CacheHasher = foldhash::fast::RandomState;
