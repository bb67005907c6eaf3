"""Screens: chat, edit (live diff + review), replay, help."""
