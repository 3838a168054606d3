"""Loading a suite: one loader for every test file and the config (:mod:`.loader`), which
files are tests (:mod:`.discovery`), case files as tests (:mod:`.datasuite`,
:mod:`.casefiles`), what ``agent-health list`` says (:mod:`.listing`), and which tests run
(:mod:`.select`, :mod:`.lastfailed`, :mod:`.quarantine`).
"""
