"""soloist in a Flask app: a view queues a task, worker processes run it.

Run the site and the workers against one store (as many of each as you like):

    flask --app flask_app:web run
    soloist run flask_app:app

then ``curl -X POST localhost:5000/signup -H 'content-type: application/json' -d
'{"email": "ada@example.com"}'`` and ``soloist history --job send_welcome``.
"""

from flask import Flask, jsonify, request
from flask.typing import ResponseReturnValue

from soloist import JobContext, Scheduler

app = Scheduler()  # SOLOIST_STORE_URL, or ./soloist.db


@app.task(retries=3, backoff="exponential", timeout="1m")
def send_welcome(ctx: JobContext, to: str) -> dict[str, str]:
    ctx.logger.info("welcome mail to %s", to)
    return {"to": to}


web = Flask(__name__)


@web.post("/signup")
def signup() -> ResponseReturnValue:
    email = (request.get_json(silent=True) or {}).get("email", "")
    if not isinstance(email, str) or "@" not in email:
        return jsonify(error=f"invalid email {email!r}"), 400
    occurrence = app.enqueue(send_welcome, {"to": email})  # the workers run it once
    return jsonify(occurrence=occurrence)
