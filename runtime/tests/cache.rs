//! The disk cache under concurrency: several threads and several processes
//! asking for one key build it once and all read the same bytes.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokitai_runtime::cache::DiskCache;

fn fresh_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tokitai-cache-test-{}-{}", tag, std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn concurrent_threads_build_a_key_once() {
    let dir = fresh_dir("threads");
    let builds = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let (dir, builds) = (dir.clone(), builds.clone());
            std::thread::spawn(move || {
                // Each thread opens its own cache handle, as processes would.
                DiskCache::new(&dir)
                    .get_or_build("k1", "bin", || {
                        builds.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(std::time::Duration::from_millis(50));
                        Ok(b"compiled".to_vec())
                    })
                    .unwrap()
                    .0
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), b"compiled");
    }
    assert_eq!(builds.load(Ordering::SeqCst), 1);
    // No temporary files are left behind.
    let names: Vec<String> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{:?}", names);
}

/// Child processes (this test binary, re-run with an environment variable)
/// race for one key; each records whether it built. Exactly one did.
#[test]
fn concurrent_processes_build_a_key_once() {
    if let Ok(dir) = std::env::var("TOKITAI_CACHE_CHILD") {
        let (_, hit) = DiskCache::new(&dir)
            .get_or_build("shared", "bin", || {
                std::thread::sleep(std::time::Duration::from_millis(100));
                Ok(b"from a child".to_vec())
            })
            .unwrap();
        println!("CHILD-RESULT {}", if hit { "read" } else { "built" });
        return;
    }
    let dir = fresh_dir("procs");
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..6)
        .map(|_| {
            std::process::Command::new(&exe)
                .args(["--exact", "concurrent_processes_build_a_key_once", "--nocapture", "--test-threads=1"])
                .env("TOKITAI_CACHE_CHILD", &dir)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut built = 0;
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("CHILD-RESULT"), "{}", text);
        built += text.contains("CHILD-RESULT built") as usize;
    }
    assert_eq!(built, 1);
    assert_eq!(std::fs::read(dir.join("shared.bin")).unwrap(), b"from a child");
}

#[test]
fn a_failed_build_publishes_nothing() {
    let dir = fresh_dir("fail");
    let c = DiskCache::new(&dir);
    assert!(c.get_or_build("bad", "bin", || Err(tokitai_runtime::Error::Tensor("compiler said no".into()))).is_err());
    assert!(!c.path("bad", "bin").exists());
    let (bytes, hit) = c.get_or_build("bad", "bin", || Ok(b"second try".to_vec())).unwrap();
    assert_eq!((bytes.as_slice(), hit), (&b"second try"[..], false));
}
