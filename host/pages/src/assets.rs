//! The stylesheet and scripts, embedded in the binary and served under content-hashed names
//! (`/static/app.3f2a….css`), so a browser may keep them for a year and a new build is never
//! served a stale copy. Each is compressed once, on first use, with brotli and with gzip (for
//! clients without brotli: browsers offer it only over TLS).

use std::io::Write;
use std::sync::LazyLock;

use flate2::write::GzEncoder;
use sha2::{Digest, Sha256};

/// One embedded file.
#[derive(Debug)]
pub struct Asset {
    /// Its content-hashed URL path, e.g. `/static/app.3f2a9c1d0b7e.css`.
    pub path: String,
    /// Its `Content-Type`.
    pub content_type: &'static str,
    /// The bytes.
    pub body: &'static [u8],
    /// The bytes gzipped.
    pub gzipped: Vec<u8>,
    /// The bytes compressed with brotli.
    pub brotli: Vec<u8>,
}

fn asset(stem: &str, ext: &str, content_type: &'static str, body: &'static [u8]) -> Asset {
    let hash = hex::encode(&Sha256::digest(body)[..6]);
    let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(body).expect("gzip into memory");
    let mut br = brotli::CompressorWriter::new(Vec::new(), 4096, 11, 22);
    br.write_all(body).expect("brotli into memory");
    Asset {
        brotli: br.into_inner(),
        path: format!("/static/{stem}.{hash}.{ext}"),
        content_type,
        body,
        gzipped: gz.finish().expect("gzip into memory"),
    }
}

/// Every asset.
pub static ASSETS: LazyLock<[Asset; 2]> = LazyLock::new(|| {
    [
        asset(
            "app",
            "css",
            "text/css; charset=utf-8",
            include_bytes!("../assets/app.css"),
        ),
        asset(
            "app",
            "js",
            "text/javascript; charset=utf-8",
            include_bytes!("../assets/app.js"),
        ),
    ]
});

/// The stylesheet's URL path.
pub fn css() -> &'static str {
    &ASSETS[0].path
}

/// The script's URL path.
pub fn js() -> &'static str {
    &ASSETS[1].path
}

/// The asset at a URL path, if any.
pub fn find(path: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.path == path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_content_hash_and_resolve() {
        let css = css();
        assert!(
            css.starts_with("/static/app.") && css.ends_with(".css"),
            "{css}"
        );
        assert_eq!(find(css).unwrap().body, include_bytes!("../assets/app.css"));
        assert!(find("/static/app.css").is_none());
        let js = find(js()).unwrap();
        assert!(js.gzipped.len() < js.body.len());
        assert!(js.brotli.len() < js.gzipped.len());
        let mut back = Vec::new();
        brotli::BrotliDecompress(&mut js.brotli.as_slice(), &mut back).unwrap();
        assert_eq!(back, js.body);
    }
}
