"""The terminal setting's tasks: hand-written shell tasks, each with an automatic check.

Categories: files, text, archives, git, permissions, scripts. Every task is plain data (see
``terminal.py`` for what ``files``, ``dirs``, ``modes``, ``setup`` and ``checks`` mean) and uses
only tools that every Debian/Ubuntu base system has in /usr/bin: coreutils, findutils, grep, sed, awk, tar,
gzip, git and bash (zip is not assumed).

Design rule for checks: every check fails on the untouched workspace, so doing nothing (or answering DONE at
once) earns the bottom reward -1; a check that would hold from the start ("the other files are still there")
is folded into one that needs work.

Split rule (fixed, stable when tasks are added or reordered): a task is held out iff the SHA-256 of its id,
read as a number, is divisible by 5 (``split_of``); about 20% of the tasks. Generated files are built
deterministically (no randomness at import), so a task id always means the same task.
"""

from __future__ import annotations

import random

from slime_ext.envs.base import EnvTask
from slime_ext.envs.checks import split_of

SETTING = "terminal"
CATEGORIES = ("files", "text", "archives", "git", "permissions", "scripts")


def _task(task_id: str, category: str, instruction: str, checks: list[dict], **data) -> EnvTask:
    assert category in CATEGORIES, category
    return EnvTask(task_id, SETTING, split_of(task_id), instruction, {"category": category, **data, "checks": checks})


def _lines(*lines: str) -> str:
    return "".join(line + "\n" for line in lines)


def _sh(cmd: str, stdout: str | None = None, stdin: str | None = None) -> dict:
    check: dict = {"sh": cmd}
    if stdin is not None:
        check["stdin"] = stdin
    if stdout is not None:
        check["stdout"] = stdout
    return check


# ----------------------------------------------------------------------------- generated contents
_ACCESS_LOG = _lines(*(f"10.0.0.{i % 9} - - [GET /page/{i}] {200 if i % 7 else 404}" for i in range(137)))
_LEVELS = ["INFO", "INFO", "WARN", "ERROR", "INFO", "DEBUG"]
_APP_LOG_LINES = [f"2024-05-0{1 + i // 10} 12:{i:02d}:00 {_LEVELS[i % 6]} request {i} " +
                  ("failed: disk full" if _LEVELS[i % 6] == "ERROR" else "ok") for i in range(30)]
_APP_LOG_LINES.insert(7, "2024-05-01 12:59:59 INFO retry after error (recovered)")  # lower-case 'error': no match
_NAMES = "Maya Liam Ava Noah Zoe Eli Maya Ava Ava Omar Liam Iris Zoe Noah Maya".split()
_WORDS = ["apple"] * 7 + ["pear"] * 5 + ["fig"] * 4 + ["kiwi"] * 2 + ["plum"]
random.Random(7).shuffle(_WORDS)
_SALES = [("north", "tea", 120), ("south", "coffee", 75), ("east", "tea", 30), ("north", "cocoa", 42),
          ("west", "coffee", 310), ("south", "tea", 8), ("east", "cocoa", 95)]
_USERS = [("root", 0, "/bin/bash"), ("daemon", 1, "/usr/sbin/nologin"), ("alice", 1000, "/bin/bash"),
          ("bob", 1001, "/bin/zsh"), ("carol", 1002, "/bin/bash"), ("dave", 1003, "/bin/sh"),
          ("erin", 1004, "/usr/bin/bash")]
_TODO = ["buy milk", "call mom", "fix bike", "buy milk", "write report", "call mom", "buy milk", "water plants"]
_SERVER_LOG = _lines("connect ok", "Timeout waiting for db", "retry", "TIMEOUT on upstream", "served /index",
                     "read timeout (5s)", "served /about", "Connection reset", "timeouts: 3 so far", "done")
_MEASUREMENTS = "station,day,temp\n" + "".join(f"s{i % 4},{i // 4 + 1},{(i * 37) % 31 - 5}\n" for i in range(23))
_FIZZ = ["FizzBuzz" if i % 15 == 0 else "Fizz" if i % 3 == 0 else "Buzz" if i % 5 == 0 else str(i)
         for i in range(1, 16)]
_GIT_INIT = "git init -q && git add -A && git commit -qm "


def _files_tasks() -> list[EnvTask]:
    return [
        _task("term-make-dirs", "files",
              "Create the directories `project/src`, `project/tests` and `project/docs`, and an empty file "
              "`project/README.md`.",
              [{"path": "project/src", "kind": "dir"}, {"path": "project/tests", "kind": "dir"},
               {"path": "project/docs", "kind": "dir"}, {"path": "project/README.md", "kind": "file"}]),
        _task("term-rename-ext", "files",
              "Rename every `.txt` file in `docs/` to the same name with the extension `.md` (`intro.txt` becomes "
              "`intro.md`). Do not touch the other files.",
              [{"file": "docs/intro.md", "equals": "Introduction\n"}, {"file": "docs/usage.md", "equals": "Usage\n"},
               _sh("test ! -e docs/intro.txt && test ! -e docs/usage.txt && test -f docs/notes.log")],
              files={"docs/intro.txt": "Introduction\n", "docs/usage.txt": "Usage\n", "docs/notes.log": "keep me\n"}),
        _task("term-move-logs", "files",
              "Move every `.log` file found anywhere under `app/` into a new top-level directory `logs/`, side by "
              "side (for example `app/jobs/worker.log` becomes `logs/worker.log`). Leave the other files where "
              "they are.",
              [{"file": "logs/server.log", "equals": "server\n"}, {"file": "logs/worker.log", "equals": "worker\n"},
               {"file": "logs/cron.log", "equals": "cron\n"},
               _sh("test -z \"$(find app -name '*.log')\" && test -f app/config.yml")],
              files={"app/server.log": "server\n", "app/jobs/worker.log": "worker\n",
                     "app/jobs/old/cron.log": "cron\n", "app/config.yml": "port: 80\n"}),
        _task("term-find-large", "files",
              "Write to `big.txt` the paths of all files under `data/` that are larger than 1000 bytes, one per "
              "line, sorted, each written as `data/...` (for example `data/x/y.bin`).",
              [{"file": "big.txt", "equals": "data/b.bin\ndata/sub/c.dat\n"}],
              files={"data/a.bin": "x" * 500, "data/b.bin": "x" * 1500, "data/sub/c.dat": "y" * 3000,
                     "data/sub/d.txt": "z" * 1000, "data/e.txt": "small\n"}),
        _task("term-copy-tree", "files",
              "Make a copy of the directory `site` named `site.bak`, with the same files and contents. "
              "Leave `site` as it is.",
              [_sh("diff -r site site.bak"), {"file": "site.bak/css/style.css", "equals": "body { margin: 0; }\n"}],
              files={"site/index.html": "<h1>Home</h1>\n", "site/css/style.css": "body { margin: 0; }\n",
                     "site/img/logo.svg": "<svg/>\n"}),
        _task("term-symlink", "files",
              "Create a symbolic link named `current` that points to the directory `releases/v2`, using the relative "
              "target `releases/v2`.",
              [{"path": "current", "kind": "symlink", "target": "releases/v2"}, _sh("cat current/VERSION", "2.0")],
              files={"releases/v1/VERSION": "1.0\n", "releases/v2/VERSION": "2.0\n"}),
        _task("term-delete-empty", "files",
              "Delete every empty file under `tmp/`, at any depth. Keep the non-empty files and all directories.",
              [_sh("test -z \"$(find tmp -type f -empty)\""),
               _sh("test ! -e tmp/a.txt && test -s tmp/b/keep.txt && test -s tmp/notes.md && test -d tmp/d")],
              files={"tmp/a.txt": "", "tmp/b/c.txt": "", "tmp/b/keep.txt": "data\n", "tmp/d/e.log": "",
                     "tmp/notes.md": "keep\n"}),
    ]


def _text_tasks() -> list[EnvTask]:
    dedup = list(dict.fromkeys(_TODO))
    return [
        _task("term-count-lines", "text",
              "Write the number of lines in `access.log` to `count.txt` (only the number).",
              [{"file": "count.txt", "equals": "137\n"}], files={"access.log": _ACCESS_LOG}),
        _task("term-grep-errors", "text",
              "Copy every line of `app.log` that contains `ERROR` (upper case) into `errors.txt`, in their original "
              "order.",
              [{"file": "errors.txt", "equals": _lines(*(line for line in _APP_LOG_LINES if "ERROR" in line))}],
              files={"app.log": _lines(*_APP_LOG_LINES)}),
        _task("term-sed-replace", "text",
              "In `config.ini`, replace every occurrence of `localhost` with `db.internal`, editing the file in place.",
              [{"file": "config.ini", "lacks": "localhost"},
               {"file": "config.ini", "equals": _lines("[database]", "host = db.internal", "port = 5432", "[cache]",
                                                       "url = redis://db.internal:6379",
                                                       "allowed = db.internal,db.internal.localdomain")}],
              files={"config.ini": _lines("[database]", "host = localhost", "port = 5432", "[cache]",
                                          "url = redis://localhost:6379",
                                          "allowed = localhost,localhost.localdomain")}),
        _task("term-sort-uniq", "text",
              "`names.txt` has one name per line, with repeats. Write the distinct names, sorted alphabetically, one "
              "per line, to `unique.txt`.",
              [{"file": "unique.txt", "equals": _lines(*sorted(set(_NAMES)))}], files={"names.txt": _lines(*_NAMES)}),
        _task("term-word-freq", "text",
              "`words.txt` has one word per line. Write its three most frequent words to `top3.txt`, most frequent "
              "first, one per line as `WORD COUNT` (for example `tea 12`).",
              [{"file": "top3.txt", "equals": "apple 7\npear 5\nfig 4\n"}], files={"words.txt": _lines(*_WORDS)}),
        _task("term-csv-sum", "text",
              "`sales.csv` has a header line and the columns region,product,amount. Write the sum of the `amount` "
              "column to `total.txt` (only the number).",
              [{"file": "total.txt", "equals": f"{sum(a for _, _, a in _SALES)}\n"}],
              files={"sales.csv": _lines("region,product,amount", *(f"{r},{p},{a}" for r, p, a in _SALES))}),
        _task("term-cut-field", "text",
              "Each line of `users.txt` is `name:uid:shell`. Write the names of the users whose shell is exactly "
              "`/bin/bash` to `bash_users.txt`, one per line, in file order.",
              [{"file": "bash_users.txt", "equals": _lines(*(n for n, _, s in _USERS if s == "/bin/bash"))}],
              files={"users.txt": _lines(*(f"{n}:{u}:{s}" for n, u, s in _USERS))}),
        _task("term-line-range", "text",
              "Write lines 10 to 20 (inclusive) of `numbers.txt` to `middle.txt`.",
              [{"file": "middle.txt", "equals": _lines(*(f"entry {i * 3}" for i in range(10, 21)))}],
              files={"numbers.txt": _lines(*(f"entry {i * 3}" for i in range(1, 51)))}),
        _task("term-dedupe-keep-order", "text",
              "Remove the duplicate lines from `todo.txt`, editing it in place: keep the first occurrence of each "
              "line and the original order.",
              [{"file": "todo.txt", "equals": _lines(*dedup)}], files={"todo.txt": _lines(*_TODO)}),
        _task("term-count-matches", "text",
              "Count the lines of `server.log` that contain the word `timeout` in any letter case (`Timeout`, "
              "`TIMEOUT`, `timeouts`, ... all count) and write the number to `timeouts.txt`.",
              [{"file": "timeouts.txt", "equals": "4\n"}], files={"server.log": _SERVER_LOG}),
    ]


def _archive_tasks() -> list[EnvTask]:
    return [
        _task("term-tar-create", "archives",
              "Create a gzip-compressed tar archive `project.tar.gz` of the directory `project`, so that the paths "
              "inside start with `project/`.",
              [_sh("gzip -t project.tar.gz"),
               _sh('d=$(mktemp -d) && tar -xzf project.tar.gz -C "$d" && diff -r project "$d/project"')],
              files={"project/src/main.c": "int main(void) { return 0; }\n",
                     "project/include/util.h": "#pragma once\n", "project/README": "A project.\n"}),
        _task("term-tar-extract", "archives",
              "Extract the archive `bundle.tar.gz` into a new directory `unpacked/` (so that `unpacked/pkg/bin/hello` "
              "exists).",
              [{"file": "unpacked/pkg/bin/hello", "equals": "echo hi\n"},
               {"file": "unpacked/pkg/share/README", "equals": "manual\n"}],
              setup="mkdir -p pkg/bin pkg/share && echo 'echo hi' > pkg/bin/hello && echo manual > pkg/share/README "
                    "&& tar -czf bundle.tar.gz pkg && rm -r pkg"),
        _task("term-gunzip-count", "archives",
              "Decompress `measurements.csv.gz` so that `measurements.csv` exists, then write the number of data "
              "rows (every line except the header) to `rows.txt`.",
              [{"file": "measurements.csv", "equals": _MEASUREMENTS}, {"file": "rows.txt", "equals": "23\n"}],
              files={"measurements.csv": _MEASUREMENTS}, setup="gzip measurements.csv"),
        _task("term-tar-list", "archives",
              "Write the paths of the regular files stored in `release.tar` (not the directories), as `tar -tf` "
              "prints them, sorted, one per line, to `contents.txt`.",
              [{"file": "contents.txt", "equals": "app/bin/run\napp/lib/core.so\napp/lib/util.so\napp/version.txt\n"}],
              files={"app/bin/run": "#!/bin/sh\n", "app/lib/core.so": "core\n", "app/lib/util.so": "util\n",
                     "app/version.txt": "3.1\n"},
              setup="tar -cf release.tar app && rm -r app"),
        _task("term-tar-exclude", "archives",
              "Create `src.tar.gz`, a gzip-compressed tar archive of the directory `src` (paths inside starting with "
              "`src/`) that leaves out every `.o` file.",
              [_sh(r"tar -tzf src.tar.gz | sed 's|^\./||' | grep -v '/$' | sort", "src/lib/util.c\nsrc/main.c\n")],
              files={"src/main.c": "int main;\n", "src/main.o": "obj\n", "src/lib/util.c": "int u;\n",
                     "src/lib/util.o": "obj\n"}),
        _task("term-gzip-logs", "archives",
              "Compress each `.log` file in `logs/` with gzip, so that `logs/` holds `app.log.gz` and `db.log.gz` "
              "instead of the `.log` files. Leave `readme.txt` as it is.",
              [_sh("ls logs", "app.log.gz\ndb.log.gz\nreadme.txt\n"),
               _sh("zcat logs/app.log.gz logs/db.log.gz", "app started\napp stopped\ndb ready\n")],
              files={"logs/app.log": "app started\napp stopped\n", "logs/db.log": "db ready\n",
                     "logs/readme.txt": "rotated weekly\n"}),
        _task("term-tar-extract-one", "archives",
              "From `archive.tar.gz` extract only the file `docs/guide.txt` (it must end up at `docs/guide.txt` in "
              "the current directory); do not extract anything else.",
              [{"file": "docs/guide.txt", "equals": "Read me first.\n"},
               _sh("test -f docs/guide.txt && test ! -e docs/api.txt && test ! -e src")],
              files={"docs/guide.txt": "Read me first.\n", "docs/api.txt": "API\n", "src/x.c": "int x;\n"},
              setup="tar -czf archive.tar.gz docs src && rm -r docs src"),
    ]


def _git_tasks() -> list[EnvTask]:
    note = " (A git identity is already configured.)"
    return [
        _task("term-git-init-commit", "git",
              "Turn this directory into a git repository and commit the two files `README.md` and `main.py` in a "
              "single commit with the message `Initial commit`." + note,
              [_sh("git log --format=%s", "Initial commit\n"),
               _sh("git ls-tree -r --name-only HEAD", "README.md\nmain.py\n")],
              files={"README.md": "# Demo\n", "main.py": "print('hi')\n"}),
        _task("term-git-branch", "git",
              "In this git repository, create a branch `feature` from the current commit and switch to it; on it, add "
              "a file `feature.txt` containing the line `new feature` and commit it. Leave `main` as it is." + note,
              [_sh("git rev-parse --abbrev-ref HEAD", "feature\n"),
               _sh("git show feature:feature.txt", "new feature\n"),
               _sh('test "$(git rev-list --count main)" = 1 && test "$(git rev-list --count feature)" = 2')],
              files={"app.txt": "v1\n"}, setup=_GIT_INIT + "'Add app'"),
        _task("term-git-amend", "git",
              "The last commit of this git repository has a typo in its message: `Fix bgu`. Change the message to "
              "`Fix bug` without changing the commit's content and without adding a commit." + note,
              [_sh("git log -1 --format=%s", "Fix bug\n"),
               _sh('test "$(git rev-parse "HEAD^{tree}")" = "$(git rev-parse "before^{tree}")" && '
                   'test "$(git rev-list --count HEAD)" = 2 && '
                   'test "$(git rev-parse HEAD)" != "$(git rev-parse before)"')],
              files={"a.py": "x = 1\n"},
              setup=_GIT_INIT + "'Add a' && echo 'x = 2' > a.py && git commit -qam 'Fix bgu' && git tag before"),
        _task("term-git-ignore", "git",
              "Add a `.gitignore` to this git repository so that git ignores all `*.pyc` files and the `build/` "
              "directory, and commit it (only the `.gitignore`)." + note,
              [_sh("git check-ignore -q cache.pyc && git check-ignore -q pkg/mod.pyc && "
                   "git check-ignore -q build/out.bin"),
               _sh("git ls-tree -r --name-only HEAD", ".gitignore\napp.py\n")],
              files={"app.py": "print(1)\n", "build/out.bin": "bin\n", "cache.pyc": "pyc\n"},
              setup="git init -q && git add app.py && git commit -qm init"),
        _task("term-git-restore", "git",
              "Throw away all uncommitted changes in this git repository, so that the files match the last commit "
              "again." + note,
              [{"file": "app.py", "equals": "print('v1')\n"}, {"file": "notes.txt", "equals": "remember\n"}],
              files={"app.py": "print('v1')\n", "notes.txt": "remember\n"},
              setup=_GIT_INIT + "init && echo \"print('broken')\" > app.py && rm notes.txt"),
        _task("term-git-merge", "git",
              "Merge the branch `fix` into `main` (`main` is checked out) and stay on `main`." + note,
              [_sh('test "$(git rev-parse --abbrev-ref HEAD)" = main && git merge-base --is-ancestor fix main'),
               {"file": "fix.txt", "equals": "patched\n"}],
              files={"base.txt": "base\n"},
              setup=_GIT_INIT + "base && git checkout -qb fix && echo patched > fix.txt && git add fix.txt && "
                    "git commit -qm 'Add fix' && git checkout -q main && echo more >> base.txt && "
                    "git commit -qam 'Extend base'"),
        _task("term-git-file-history", "git",
              "Write the subject lines of the commits of this git repository that changed `lib.py`, oldest first, "
              "one per line, to `history.txt`.",
              [{"file": "history.txt", "equals": "Create lib\nExtend lib\nFix lib edge case\n"}],
              setup="git init -q && echo 1 > lib.py && git add lib.py && git commit -qm 'Create lib' && "
                    "echo a > other.py && git add other.py && git commit -qm 'Add other' && "
                    "echo 2 >> lib.py && git commit -qam 'Extend lib' && echo b >> other.py && "
                    "git commit -qam 'Tweak other' && echo 3 >> lib.py && git commit -qam 'Fix lib edge case'"),
    ]


def _permission_tasks() -> list[EnvTask]:
    return [
        _task("term-chmod-run", "permissions",
              "Make the script `run.sh` executable by its owner, then run it as `./run.sh` (it writes `result.txt`).",
              [{"path": "run.sh", "kind": "file", "executable": True}, {"file": "result.txt", "equals": "ok\n"}],
              files={"run.sh": "#!/bin/sh\necho ok > result.txt\n"}, modes={"run.sh": "644"}),
        _task("term-chmod-private", "permissions",
              "Change the permissions of `secret.key` so that only its owner can read and write it and nobody can do "
              "anything else (mode 600).",
              [{"path": "secret.key", "kind": "file", "mode": "600"}],
              files={"secret.key": "hunter2\n"}, modes={"secret.key": "644"}),
        _task("term-chmod-tree", "permissions",
              "Under `share/` (including `share` itself), set every directory to mode 755 and every regular file to "
              "mode 644.",
              [_sh('test -z "$(find share -type d ! -perm 755)"'), _sh('test -z "$(find share -type f ! -perm 644)"')],
              files={"share/b.txt": "b\n", "share/docs/a.txt": "a\n", "share/docs/img/logo.svg": "<svg/>\n"},
              modes={"share/b.txt": "777", "share/docs/a.txt": "600", "share/docs/img/logo.svg": "640",
                     "share/docs/img": "711", "share/docs": "700", "share": "750"}),
        _task("term-list-executables", "permissions",
              "Write to `exec.txt` the paths (written as `bin/...`) of the regular files under `bin/` that are "
              "executable by their owner, one per line, sorted.",
              [{"file": "exec.txt", "equals": "bin/helper.sh\nbin/sub/deep\nbin/tool1\n"}],
              files={"bin/tool1": "#!/bin/sh\n", "bin/tool2": "#!/bin/sh\n", "bin/helper.sh": "#!/bin/sh\n",
                     "bin/data.txt": "data\n", "bin/sub/deep": "#!/bin/sh\n"},
              modes={"bin/tool1": "755", "bin/tool2": "644", "bin/helper.sh": "700", "bin/data.txt": "600",
                     "bin/sub/deep": "750"}),
        _task("term-read-only", "permissions",
              "Make the directory `archive` and everything in it read-only for everyone: remove every write "
              "permission and keep the rest, so that its directories end up with mode 555 and its files with mode 444.",
              [_sh('test -z "$(find archive -perm /222)"'),
               _sh('test -z "$(find archive -type d ! -perm 555)" && test -z "$(find archive -type f ! -perm 444)"')],
              files={"archive/2023.csv": "a,b\n", "archive/old/2022.csv": "c,d\n"}),
    ]


def _script_tasks() -> list[EnvTask]:
    return [
        _task("term-script-greet", "scripts",
              "Write an executable shell script `greet.sh` that prints `Hello, NAME!` where NAME is its first "
              "argument, or `Hello, world!` when it gets no argument.",
              [_sh("./greet.sh Ada", "Hello, Ada!\n"), _sh("./greet.sh", "Hello, world!\n"),
               _sh("./greet.sh 'Grace Hopper'", "Hello, Grace Hopper!\n")]),
        _task("term-script-sum", "scripts",
              "Write an executable script `sum.sh` that reads integers from standard input, one per line, and prints "
              "their sum (0 for an empty input).",
              [_sh("./sum.sh", "6\n", stdin="1\n2\n3\n"), _sh("./sum.sh", "95\n", stdin="-5\n100\n"),
               _sh("./sum.sh", "0\n", stdin="")]),
        _task("term-script-count-ext", "scripts",
              "Write an executable script `count_ext.sh` that takes a directory and an extension without the dot "
              "(for example `./count_ext.sh src py`) and prints how many regular files under that directory, at any "
              "depth, have that extension.",
              [_sh('d=$(mktemp -d) && mkdir -p "$d/a/b" && touch "$d/x.py" "$d/a/y.py" "$d/a/b/z.py" "$d/a/w.txt" '
                   '"$d/py" && ./count_ext.sh "$d" py', "3\n"),
               _sh('d=$(mktemp -d) && mkdir -p "$d/k" && touch "$d/k/n.md" "$d/m.txt" && ./count_ext.sh "$d" md',
                   "1\n")]),
        _task("term-script-fizzbuzz", "scripts",
              "Write an executable script `fizzbuzz.sh` that takes a number N and prints the numbers from 1 to N, one "
              "per line, but `Fizz` for multiples of 3, `Buzz` for multiples of 5 and `FizzBuzz` for multiples of "
              "both.",
              [_sh("./fizzbuzz.sh 15", _lines(*_FIZZ)), _sh("./fizzbuzz.sh 2", "1\n2\n")]),
        _task("term-script-max", "scripts",
              "Write an executable script `max.sh` that prints the largest of its integer arguments (for example "
              "`./max.sh 3 9 -2` prints `9`). Called with no arguments, it must print a line starting with `usage:` "
              "to standard error and exit with status 2.",
              [_sh("./max.sh 3 9 -2", "9\n"), _sh("./max.sh -5 -1 -7", "-1\n"),
               _sh('./max.sh > /dev/null 2> "$TMPDIR/err"; test $? -eq 2 && grep -q "^usage:" "$TMPDIR/err"')]),
    ]


def tasks() -> list[EnvTask]:
    """Every terminal task, train and held-out, grouped by category."""
    return [*_files_tasks(), *_text_tasks(), *_archive_tasks(), *_git_tasks(), *_permission_tasks(), *_script_tasks()]
