"""What a local run records and replays: each (test, repeat) as a ledger cell through the
run's in-process gateway (:mod:`.recording`, its records: :mod:`.runrecord`; a cell that
could not be sealed: :mod:`.refusal`), the run's peers behind that gateway
(:mod:`.peerroutes`), the OTLP receiver of the agents it starts (:mod:`.receiver`), and a
recorded run answering ``agent.run()`` again (:mod:`.replay`, found and checked by
:mod:`.recordings`).
"""
