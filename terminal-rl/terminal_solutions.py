"""The terminal setting's scripted solutions: one per task, the messages a competent agent sends, in order.

What ``openclaw-rl env sft --setting terminal`` learns from (``demonstrate``, registered with the setting), and
what ``tests/test_env_terminal.py`` plays to check that every task can earn +1.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from slime_ext.envs.base import EnvTask


def bash(code: str) -> str:
    return f"I will run this.\n```bash\n{code.strip()}\n```\n"


DONE = "The task is complete.\nDONE"

# One hand-written solution per task: the messages a model would send, in order.
SOLUTIONS: dict[str, list[str]] = {
    "term-make-dirs": [bash("mkdir -p project/src project/tests project/docs && touch project/README.md"), DONE],
    "term-rename-ext": [bash('cd docs && for f in *.txt; do mv "$f" "${f%.txt}.md"; done && ls'), DONE],
    "term-move-logs": [bash("mkdir logs && find app -name '*.log' -exec mv {} logs/ \\;"), DONE],
    "term-find-large": [bash("find data -type f -size +1000c | sort > big.txt"), DONE],
    "term-copy-tree": [bash("cp -a site site.bak"), DONE],
    "term-symlink": [bash("ln -s releases/v2 current && cat current/VERSION"), DONE],
    "term-delete-empty": [bash("find tmp -type f -empty -delete"), DONE],
    "term-count-lines": [bash("wc -l < access.log > count.txt"), DONE],
    "term-grep-errors": [bash("grep ERROR app.log > errors.txt"), DONE],
    "term-sed-replace": [bash("sed -i 's/localhost/db.internal/g' config.ini"), DONE],
    "term-sort-uniq": [bash("sort -u names.txt > unique.txt"), DONE],
    "term-word-freq": [bash("sort words.txt | uniq -c | sort -rn | head -3 | awk '{print $2, $1}' > top3.txt"), DONE],
    "term-csv-sum": [bash("awk -F, 'NR > 1 { s += $3 } END { print s }' sales.csv > total.txt"), DONE],
    "term-cut-field": [bash("awk -F: '$3 == \"/bin/bash\" { print $1 }' users.txt > bash_users.txt"), DONE],
    "term-line-range": [bash("sed -n '10,20p' numbers.txt > middle.txt"), DONE],
    "term-dedupe-keep-order": [bash("awk '!seen[$0]++' todo.txt > t && mv t todo.txt"), DONE],
    "term-count-matches": [bash("grep -ci timeout server.log > timeouts.txt"), DONE],
    "term-tar-create": [bash("tar -czf project.tar.gz project"), DONE],
    "term-tar-extract": [bash("mkdir unpacked && tar -xzf bundle.tar.gz -C unpacked"), DONE],
    "term-gunzip-count": [bash("gunzip measurements.csv.gz"), bash("tail -n +2 measurements.csv | wc -l > rows.txt"),
                          DONE],
    "term-tar-list": [bash("tar -tf release.tar | grep -v '/$' | sort > contents.txt"), DONE],
    "term-tar-exclude": [bash("tar --exclude='*.o' -czf src.tar.gz src"), DONE],
    "term-gzip-logs": [bash("gzip logs/*.log && ls logs"), DONE],
    "term-tar-extract-one": [bash("tar -xzf archive.tar.gz docs/guide.txt"), DONE],
    "term-git-init-commit": [bash("git init -q && git add README.md main.py && git commit -qm 'Initial commit'"), DONE],
    "term-git-branch": [bash("git checkout -b feature && echo 'new feature' > feature.txt && git add feature.txt && "
                             "git commit -m 'Add feature'"), DONE],
    "term-git-amend": [bash("git commit --amend -m 'Fix bug'"), DONE],
    "term-git-ignore": [bash("printf '*.pyc\\nbuild/\\n' > .gitignore && git add .gitignore && git commit -m ignore"),
                        DONE],
    "term-git-restore": [bash("git checkout -- . && git status --short"), DONE],
    "term-git-merge": [bash("git merge --no-edit fix"), DONE],
    "term-git-file-history": [bash("git log --reverse --format=%s -- lib.py > history.txt"), DONE],
    "term-chmod-run": [bash("chmod u+x run.sh && ./run.sh"), DONE],
    "term-chmod-private": [bash("chmod 600 secret.key"), DONE],
    "term-chmod-tree": [bash("find share -type d -exec chmod 755 {} + && find share -type f -exec chmod 644 {} +"),
                        DONE],
    "term-list-executables": [bash("find bin -type f -perm -u+x | sort > exec.txt"), DONE],
    "term-read-only": [bash("chmod -R a-w archive"), DONE],
    "term-script-greet": [bash("cat > greet.sh <<'EOF'\n#!/bin/sh\necho \"Hello, ${1:-world}!\"\nEOF\n"
                               "chmod +x greet.sh"),
                          DONE],
    "term-script-sum": [bash("cat > sum.sh <<'EOF'\n#!/bin/sh\ns=0\nwhile read -r n; do s=$((s + n)); done\necho $s\n"
                             "EOF\nchmod +x sum.sh && printf '1\\n2\\n' | ./sum.sh"), DONE],
    "term-script-count-ext": [bash("cat > count_ext.sh <<'EOF'\n#!/bin/sh\nfind \"$1\" -type f -name \"*.$2\" | wc -l\n"
                                   "EOF\nchmod +x count_ext.sh"), DONE],
    "term-script-fizzbuzz": [bash("cat > fizzbuzz.sh <<'EOF'\n#!/bin/bash\nfor ((i = 1; i <= $1; i++)); do\n"
                                  "  if ((i % 15 == 0)); then echo FizzBuzz; elif ((i % 3 == 0)); then echo Fizz;\n"
                                  "  elif ((i % 5 == 0)); then echo Buzz; else echo $i; fi\ndone\nEOF\n"
                                  "chmod +x fizzbuzz.sh"), DONE],
    "term-script-max": [bash("cat > max.sh <<'EOF'\n#!/bin/sh\n"
                             "[ $# -eq 0 ] && { echo 'usage: max.sh N...' >&2; exit 2; }\n"
                             "m=$1\nfor n; do [ \"$n\" -gt \"$m\" ] && m=$n; done\necho $m\nEOF\n"
                             "chmod +x max.sh"), DONE],
}


def demonstrate(task: EnvTask, env: Any = None) -> Iterator[str]:
    """The task's scripted solution (``register_setting``'s ``demonstrate_fn``); the env is not read."""
    yield from SOLUTIONS[task.id]
