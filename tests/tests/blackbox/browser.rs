//! A headless Chromium driven over WebDriver (Debian's `chromium` and `chromium-driver`,
//! which `.ci/run` installs): the W3C protocol spoken directly with the blocking HTTP client
//! the other tests use, which is all these tests need of a WebDriver client.
//!
//! Chromium resolves every host but 127.0.0.1 to nothing, so a page that reaches for the
//! network fails loudly: the request shows in [`Browser::foreign_requests`] and as a console
//! error in [`Browser::console_errors`].

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::blocking::Client;
use serde_json::{json, Value};

use crate::support::{free_port, TempDir};

/// The W3C key of an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// One browser session with its own chromedriver and profile.
pub struct Browser {
    driver: Child,
    http: Client,
    session: String,
    base: String,
    _profile: TempDir,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium (panics naming the packages when absent).
    pub fn start() -> Self {
        let chromedriver = ["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .expect("chromedriver not found: install Debian's chromium and chromium-driver (.ci/run does)");
        let port = free_port();
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let base = format!("http://127.0.0.1:{port}");
        let http = Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while http.get(format!("{base}/status")).send().is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        let profile = TempDir::new();
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:loggingPrefs": {"browser": "ALL"},
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-quic", "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--disable-extensions",
                    "--window-size=1280,900",
                    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
                    format!("--user-data-dir={}", profile.0.display()),
                ]
            }
        }}});
        let resp: Value = http
            .post(format!("{base}/session"))
            .json(&caps)
            .send()
            .expect("create a WebDriver session")
            .json()
            .unwrap();
        let session = resp["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session: {resp}"))
            .to_owned();
        Browser {
            driver,
            http,
            session,
            base,
            _profile: profile,
        }
    }

    fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let mut rb = self.http.request(method, url);
        if let Some(b) = body {
            rb = rb.json(&b);
        }
        let v: Value = rb.send().expect("WebDriver call").json().unwrap();
        v["value"].clone()
    }

    fn ok(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let v = self.call(method, path, body);
        assert!(
            v.get("error").is_none(),
            "WebDriver {path}: {}",
            v["message"]
        );
        v
    }

    /// Opens a URL and waits for the document to load.
    pub fn goto(&self, url: &str) {
        self.ok(reqwest::Method::POST, "/url", Some(json!({ "url": url })));
    }

    /// The current URL.
    pub fn url(&self) -> String {
        self.ok(reqwest::Method::GET, "/url", None)
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Runs a script (its `return` value comes back).
    pub fn js(&self, script: &str, args: Value) -> Value {
        self.ok(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({ "script": script, "args": args })),
        )
    }

    fn element(&self, css: &str) -> Option<String> {
        let v = self.call(
            reqwest::Method::POST,
            "/element",
            Some(json!({"using": "css selector", "value": css})),
        );
        v.get(ELEMENT).and_then(Value::as_str).map(str::to_owned)
    }

    /// Waits up to 10 s for an element to exist.
    pub fn wait_for(&self, css: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(id) = self.element(css) {
                return id;
            }
            assert!(
                Instant::now() < deadline,
                "no element {css} on {}",
                self.url()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits up to 10 s for a script to return true.
    pub fn wait_until(&self, what: &str, script: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.js(script, json!([])) != json!(true) {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Clicks an element.
    pub fn click(&self, css: &str) {
        let id = self.wait_for(css);
        self.ok(
            reqwest::Method::POST,
            &format!("/element/{id}/click"),
            Some(json!({})),
        );
    }

    /// Types into an element.
    pub fn type_into(&self, css: &str, text: &str) {
        let id = self.wait_for(css);
        self.ok(
            reqwest::Method::POST,
            &format!("/element/{id}/value"),
            Some(json!({ "text": text })),
        );
    }

    /// Sends keys to the page (e.g. `n`).
    pub fn key(&self, key: &str) {
        let actions = json!({"actions": [{"type": "key", "id": "kb", "actions": [
            {"type": "keyDown", "value": key}, {"type": "keyUp", "value": key}]}]});
        self.ok(reqwest::Method::POST, "/actions", Some(actions));
    }

    /// The text of the first element matching.
    pub fn text(&self, css: &str) -> String {
        let id = self.wait_for(css);
        self.ok(reqwest::Method::GET, &format!("/element/{id}/text"), None)
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The page's HTML.
    pub fn source(&self) -> String {
        self.ok(reqwest::Method::GET, "/source", None)
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Whether a JavaScript dialog (alert, confirm) is open.
    pub fn dialog_open(&self) -> bool {
        self.call(reqwest::Method::GET, "/alert/text", None)
            .get("error")
            .is_none()
    }

    /// Console messages of level SEVERE since the last call.
    pub fn console_errors(&self) -> Vec<String> {
        let v = self.call(
            reqwest::Method::POST,
            "/se/log",
            Some(json!({"type": "browser"})),
        );
        v.as_array()
            .map(|entries| {
                entries
                    .iter()
                    .filter(|e| e["level"] == "SEVERE")
                    .map(|e| e["message"].as_str().unwrap_or_default().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every resource the page requested that is not on `origin`.
    pub fn foreign_requests(&self, origin: &str) -> Vec<String> {
        let names = self.js(
            "return performance.getEntries().map(e => e.name).filter(n => /^[a-z]+:/.test(n));",
            json!([]),
        );
        names
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .filter(|n| !n.starts_with(origin) && !n.starts_with("data:"))
            .map(str::to_owned)
            .collect()
    }

    /// Saves a PNG of the page under `target/page-screenshots/<name>.png`.
    pub fn screenshot(&self, name: &str) {
        use base64::Engine as _;
        let png = self.ok(reqwest::Method::GET, "/screenshot", None);
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().unwrap())
            .unwrap();
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), bytes).unwrap();
    }
}

/// `<target>/page-screenshots`, beside the test binaries.
fn screenshot_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .and_then(|p| p.parent())
        .and_then(|p| p.parent())
        .unwrap()
        .join("page-screenshots")
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self
            .http
            .delete(format!("{}/session/{}", self.base, self.session))
            .send();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
