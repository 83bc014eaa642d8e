"""The Python floor beside the Go one (bench/nullwebhook): a minimal validating webhook on aiohttp, in a process of its own.

    python bench/pythonnull.py CERT KEY

It prints "listening on HOST:PORT" once it accepts connections. It does what bench/nullwebhook does
(decode the review, object included; answer with its uid and allowed: true) on the stack kopf's
WebhookServer serves mountwarden's webhook with: aiohttp, and the same TLS context
(ssl.create_default_context for client auth, the certificate chain loaded). It holds nothing and
shares its process with nothing, so what it adds over the Go webhook is the cost of answering in
Python at all: the floor a webhook process of mountwarden's own, apart from the operator, could reach.
"""

import asyncio
import json
import ssl
import sys

from aiohttp import web


async def allow(request: web.Request) -> web.Response:
    review = json.loads(await request.text())
    answer = {"apiVersion": review.get("apiVersion"), "kind": review.get("kind"),
              "response": {"uid": review["request"]["uid"], "allowed": True}}
    return web.json_response(answer)


async def serve(cert: str, key: str) -> None:
    app = web.Application()
    app.router.add_post("/{path:.*}", allow)
    runner = web.AppRunner(app, access_log=None, handle_signals=True)
    await runner.setup()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    host, port = runner.addresses[0][:2]
    print(f"listening on {host}:{port}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(serve(*sys.argv[1:3]))
