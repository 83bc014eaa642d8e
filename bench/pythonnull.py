"""The Python floor beside the Go one (bench/nullwebhook): a minimal validating webhook on aiohttp, in a process of its own.

    python bench/pythonnull.py -listen 127.0.0.1:0 -cert tls.crt -key tls.key

Its arguments are bench/nullwebhook's. It prints "listening on HOST:PORT" once it accepts
connections. It does what bench/nullwebhook does (decode the review, object included; answer
with its uid and allowed: true) on the stack kopf's
WebhookServer serves mountwarden's webhook with: aiohttp, and the same TLS context
(ssl.create_default_context for client auth, the certificate chain loaded). It holds nothing and
shares its process with nothing, so what it adds over the Go webhook is the cost of answering in
Python at all: the floor a webhook process of mountwarden's own, apart from the operator, could reach.
"""

import argparse
import asyncio
import json
import ssl

from aiohttp import web


async def allow(request: web.Request) -> web.Response:
    review = json.loads(await request.text())
    answer = {"apiVersion": review.get("apiVersion"), "kind": review.get("kind"),
              "response": {"uid": review["request"]["uid"], "allowed": True}}
    return web.json_response(answer)


async def serve(listen: str, cert: str, key: str) -> None:
    app = web.Application()
    app.router.add_post("/{path:.*}", allow)
    runner = web.AppRunner(app, access_log=None, handle_signals=True)
    await runner.setup()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    host, port = listen.rsplit(":", 1)
    site = web.TCPSite(runner, host, int(port), ssl_context=context)
    await site.start()
    host, port = runner.addresses[0][:2]
    print(f"listening on {host}:{port}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-listen", default="127.0.0.1:0", help="address to listen on")
    parser.add_argument("-cert", required=True, help="TLS certificate (PEM)")
    parser.add_argument("-key", required=True, help="TLS private key (PEM)")
    args = parser.parse_args()
    asyncio.run(serve(args.listen, args.cert, args.key))
