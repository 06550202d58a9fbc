"""Gives scripted ``fake@`` models gpt-4o's rates in child processes (tune's local workers) of a cap test.

Imported at start-up only by processes whose ``PYTHONPATH`` starts with this directory
(tests/tune/test_tune_cap.py sets it); ``SAAG_OPT_TEST_GPT4O_PRICES=1`` turns it on.
"""

import os

if os.environ.get("SAAG_OPT_TEST_GPT4O_PRICES") == "1":
    import saag_opt.lm.spend.accounting as accounting
    from saag_opt.lm.spend.accounting import ModelPrice

    PRICE = ModelPrice(input=2.5e-6, output=1e-5, cached_input=1.25e-6, max_output_tokens=400)
    accounting.model_price = lambda spec: PRICE
