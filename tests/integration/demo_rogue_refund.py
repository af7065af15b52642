"""`runfacts ...` (runfacts.cli.main, argv as given) where, during `runfacts demo`, a rogue
client refunds a third order straight at the payment provider, outside the dispatcher, after
the two stories played: a real second refund in the provider's ledger, so the demo's check
"exactly one refund in the provider's ledger" fails on its own evidence. Test code only
(tests/integration/test_cli_exit_codes.py); the product has no such switch.

    python tests/integration/demo_rogue_refund.py demo --prefix P
"""

from __future__ import annotations

import json
import sys
import urllib.request
from typing import Any

from runfacts.cli import main
from runfacts.demo import run as demo
from runfacts.demo.stack import API_KEY

_expiry_story = demo.expiry_story


def _expiry_then_rogue_refund(story: Any, run_id: str, ttl_ms: int) -> Any:
    played = _expiry_story(story, run_id, ttl_ms)
    body = {"idempotencyKey": "rogue:order-003", "externalRequestId": "rogue-1", "orderId": "order-003",
            "amountMinor": 500, "currency": "EUR", "leaseEpoch": 1}
    request = urllib.request.Request(story.stack.provider_url + "/refunds", data=json.dumps(body).encode(),
                                     method="POST", headers={"Content-Type": "application/json",
                                                             "Authorization": f"Bearer {API_KEY}"})
    with urllib.request.urlopen(request, timeout=5) as response:
        story.say(f"rogue client refunded order-003 outside the dispatcher (HTTP {response.status})")
    return played


if __name__ == "__main__":
    demo.expiry_story = _expiry_then_rogue_refund
    sys.argv[0] = "runfacts"
    main()
