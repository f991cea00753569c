"""The line protocol between a benchmark script and its worker processes.

The parent writes one command a line on a worker's stdin; the worker answers each with one
JSON line on stdout behind `MARK`, so whatever else a framework prints there (XLA, torch and
absl all may) never reads as an answer. A worker that exits before answering raises with its
exit code; its own traceback went to the shared stderr.
"""

import json
import subprocess
from typing import Any, Dict, Mapping, Optional, Sequence

MARK = '@@worker '


def emit(**answer: Any) -> None:
  """Worker side: one answer line."""
  print(MARK + json.dumps(answer), flush=True)


def last_answer(stdout: str) -> Dict[str, Any]:
  """The last answer in a finished worker's whole stdout."""
  return json.loads(stdout.split(MARK)[-1])


class Pipe:
  """Parent side: one worker process, `kind` naming it in errors."""

  def __init__(self, kind: str, command: Sequence[str], env: Mapping[str, str],
               cwd: Optional[str] = None):
    self.kind = kind
    self.proc = subprocess.Popen(list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True, env=dict(env), cwd=cwd)

  def read(self) -> Dict[str, Any]:
    """The worker's next answer (its ready line, or the answer to the last command)."""
    for line in self.proc.stdout:
      if line.startswith(MARK):
        return json.loads(line[len(MARK):])
    raise RuntimeError(f'the {self.kind} worker exited with {self.proc.wait()}; its error is '
                       'printed above.')

  def ask(self, command: str) -> Dict[str, Any]:
    self.proc.stdin.write(command + '\n')
    self.proc.stdin.flush()
    return self.read()

  def close(self, command: str) -> Dict[str, Any]:
    """The answer to the worker's last command, once it has exited."""
    answer = self.ask(command)
    self.proc.wait()
    return answer
