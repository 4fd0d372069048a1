"""The netns tests skip, with their reason, where no network namespace can be
made. Runs torch_pull_once_slow_link_test's script under each confinement
this machine offers that takes the capability away, and checks that every
run exits 77 (ctest's skip code) and prints one SKIP line with the reason
scripts/netns_check.sh gives:

  userns: `unshare --user --map-root-user`: uid 0, without privileges on the
    host (as root in an unprivileged container: uid 0 alone is not enough);
  nobody: `setpriv` to uid/gid 65534, when this runs as root;
  this user: as is, when this does not run as root.

The skip comes before torch and before any cluster starts, so each run takes
well under a second.
"""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REASON = "the shaped link needs network namespaces: cannot create a network namespace"


def confinements():
    """The ones that run here (a container may refuse user namespaces; a user
    namespace may have no uid 65534)."""
    candidates = [("userns", ["unshare", "--user", "--map-root-user"])]
    if os.geteuid() == 0:
        candidates.append(("nobody", ["setpriv", "--reuid=65534", "--regid=65534",
                                      "--clear-groups"]))
    else:
        candidates.append(("this user", []))
    return [(name, prefix) for name, prefix in candidates
            if subprocess.run(prefix + ["true"], capture_output=True, timeout=30).returncode == 0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    args = ap.parse_args()
    argv = [sys.executable, os.path.join(HERE, "pull_once_test.py"), "--build", args.build,
            "--case", "slow_link"]
    failures = []
    ran = confinements()
    if not ran:
        print("FAIL: no confinement runs here (unshare --user, setpriv)")
        sys.exit(1)
    for name, prefix in ran:
        r = subprocess.run(prefix + argv, capture_output=True, text=True, timeout=60)
        out = (r.stdout + r.stderr).strip()
        skips = [line for line in out.splitlines() if line.startswith("SKIP:")]
        print("%s: exit %d: %s" % (name, r.returncode, out))
        if r.returncode != 77:
            failures.append("%s: exit %d, want 77 (skipped)" % (name, r.returncode))
        elif len(skips) != 1 or REASON not in skips[0]:
            failures.append("%s: want one SKIP line containing %r" % (name, REASON))
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
