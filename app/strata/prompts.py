"""The text formats strata speaks to models: chat (ChatML) and whole-file edit.

strata-tiny is trained on exactly these strings (train/ imports this module), and the shell
builds its prompts with them, so there is one definition of each format.
"""
from __future__ import annotations

# Special tokens (added to the tokenizer as special, never split).
ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
FILE = "<|file|>"
INSTRUCTION = "<|instruction|>"
REWRITE = "<|rewrite|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END, FILE, INSTRUCTION, REWRITE)

# Jinja chat template shipped in tokenizer_config.json (rendered in a sandbox by strata.chat).
CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def edit_prompt(filename: str, original: str, instruction: str) -> str:
    """Prompt for a whole-file rewrite; the model continues with the rewritten file and then
    ENDOFTEXT. The file comes first so that a retry with a new instruction can reuse the
    checkpoint taken after the file was read (no re-prefill of the file)."""
    return f"{FILE}{filename}\n{original}{INSTRUCTION}{instruction}\n{REWRITE}"


def edit_file_prefix(filename: str, original: str) -> str:
    """The part of edit_prompt that does not depend on the instruction."""
    return f"{FILE}{filename}\n{original}"


def edit_instruction_suffix(instruction: str) -> str:
    """The rest of edit_prompt after edit_file_prefix."""
    return f"{INSTRUCTION}{instruction}\n{REWRITE}"


def edit_example(filename: str, original: str, instruction: str, rewritten: str) -> str:
    """One training example in the edit format."""
    return edit_prompt(filename, original, instruction) + rewritten + ENDOFTEXT
