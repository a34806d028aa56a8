"""A stdlib HTTP server that answers like an OpenAI-compatible endpoint and plays a persona by the
scripted persona's rules (it reads the question and answer between the prompt's ``<<<`` markers),
so an LLM-simulated run can be checked exactly; it can fail or talk nonsense on demand."""

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from slime_ext.simulate import get_persona
from slime_ext.simulate.llm_persona import THANKS_TOKEN


class _Sim(BaseHTTPRequestHandler):
    """Plays the scripted persona named in ``server.persona``; ``server.fail`` 5xx's the next N calls;
    ``server.garbage`` answers N rating requests with text that is not a rating."""

    def log_message(self, *a):  # quiet
        pass

    def do_POST(self):
        srv = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        srv.requests.append((dict(self.headers), body))
        if srv.fail > 0:
            srv.fail -= 1
            self.send_response(503)
            self.end_headers()
            return
        prompt = body["messages"][-1]["content"]
        question, answer = re.findall(r"<<<\n(.*?)\n>>>", prompt, re.S)
        task = srv.tasks[question]
        scripted = get_persona(srv.persona)
        if "Reply with one number" in prompt:
            if srv.garbage > 0:
                srv.garbage -= 1
                content = "I would say it is pretty good."
            else:
                content = f"Score: {scripted.score(task, answer)}"
        else:
            reply = scripted.reply(task, answer)
            content = f"{THANKS_TOKEN}." if reply == scripted.thanks else reply
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def start_sim_server(persona: str = "student", tasks: dict | None = None):
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Sim)
    """The server, serving on a thread; ``tasks`` maps each first message to its task."""
    srv.requests, srv.fail, srv.garbage, srv.persona, srv.tasks = [], 0, 0, persona, tasks or {}
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv
