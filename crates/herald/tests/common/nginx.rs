//! Debian's nginx run from a config a test wrote (listening on the loopback
//! ports that config names), stopped by pid when dropped.

use std::net::SocketAddr;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

pub struct Nginx {
    child: Child,
    dir: tempfile::TempDir,
}

impl Nginx {
    /// Checks `conf` with `nginx -t`, starts it in the foreground, and waits
    /// until every address of `listening` accepts connections.
    pub async fn start(conf: &str, listening: &[SocketAddr]) -> Nginx {
        let dir = tempfile::tempdir().expect("tempdir");
        let conf_path = dir.path().join("nginx.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let pid = format!("pid {};", dir.path().join("nginx.pid").display());
        let command = |globals: &str| {
            let mut c = Command::new("nginx");
            c.arg("-p").arg(dir.path()).arg("-c").arg(&conf_path).arg("-e").arg(dir.path().join("error.log"));
            c.arg("-g").arg(globals);
            c
        };
        let test = command(&pid).arg("-t").arg("-q").output().expect("run nginx -t (apt-get install nginx)");
        if !test.status.success() {
            let log = std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default();
            panic!("nginx -t refuses the config: {}{log}", String::from_utf8_lossy(&test.stderr));
        }
        let child = command(&format!("{pid} daemon off;")).spawn().expect("start nginx (apt-get install nginx)");
        let mut nginx = Nginx { child, dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        for addr in listening {
            while tokio::net::TcpStream::connect(addr).await.is_err() {
                if Instant::now() > deadline || nginx.child.try_wait().unwrap().is_some() {
                    panic!("nginx did not listen on {addr}; its log:\n{}", nginx.error_log());
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        nginx
    }

    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }

    /// SIGTERM, not SIGKILL: the master must stop its workers, or they outlive the test.
    pub fn stop(&mut self) {
        if self.child.try_wait().unwrap().is_some() {
            return;
        }
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("nginx did not stop on SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.stop();
        } else {
            let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
            let _ = self.child.wait();
        }
    }
}
