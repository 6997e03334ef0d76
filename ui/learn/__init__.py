"""The Learn tab: recorded lessons replayed with narration (view.py), their data (lessons.py), the recorder."""
