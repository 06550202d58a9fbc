"""Contract suites for every plug point, shipped so a user's own plug-in can run them too.

Each suite is a plain function that raises ``AssertionError`` naming the broken rule; call it from
any test with your plug-in and a sample it can handle:

* ``mechanism.check_mechanism(mechanism, example, agent, reviewer)`` and
  ``mechanism.check_abstention(mechanism, example, call)`` (a call the cascade does not vouch for)
* ``loader.check_loader(read, path)`` (a file with a bad record between good ones)
* ``backend.check_backend(kind, backend, texts, ...)``
* ``exporter.check_exporter(exporter, version)``
* ``environment.check_environment(make, episode, gold, wrong=...)`` (an episode and a valid transcript)

Import the module you need (``from saag_opt.testing.contracts.mechanism import check_mechanism``):
this package imports nothing, so the light suites stay light.
"""
