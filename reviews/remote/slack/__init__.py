"""Deciding from Slack (ADR 0020): what an alert carries (`alerting`: an effect's decision
buttons, `blocks`, or a halt's *Resume*), the interactivity door that takes their presses
(`door`), who pressed (`people`), what a press and a modal's submission do (`deciding` for an
effect, `halting` for a halt) and the calls back to Slack (`webapi`). Set up:
docs/operations/slack-app.md.
"""
