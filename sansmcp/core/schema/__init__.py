"""JSON Schema for ``outputSchema``: a bounded validator of our own, and its use.

Imported only when a tool's ``outputSchema`` is first compiled (``import sansmcp``
does not load it).  :mod:`.output` is what the MCP operations call;
:mod:`.validator` compiles a schema (:mod:`.keywords` holds the assertions,
:mod:`.nodes` the compiled form); :mod:`.regex` matches ``pattern`` in linear
time; :mod:`.budget` counts the steps.
"""
