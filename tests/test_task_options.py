"""A task's query options (data/task_options.py): a blank value or a repeated option is refused in one line
for image folders and text folders alike, where urllib would drop the first and keep the second silently."""
from __future__ import annotations

import pytest

from speccond.data import image_folder, text_files


@pytest.mark.parametrize("name, message", [
    ("text:/d?text=s&label=l&vocab_from=", r"option\(s\) \['vocab_from'\] have no value; give vocab_from=VALUE or leave it out"),
    ("text:/d?text=s&label=l&text=t", r"option\(s\) \['text'\] given more than once; give each once"),
    ("text:/d?text=s&label", r"a task's options look like text:DIR\?text=COLUMN&label=COLUMN"),
    ("imagefolder:/d?size=", r"option\(s\) \['size'\] have no value"),
    ("imagefolder:/d?size=32&size=64", r"option\(s\) \['size'\] given more than once"),
    ("imagefolder:/d?stream=1&stream=0", r"option\(s\) \['stream'\] given more than once"),
])
def test_a_blank_or_repeated_option_is_refused_in_one_line(name, message):
    parse = text_files.parse if name.startswith("text:") else image_folder.parse
    with pytest.raises(ValueError, match=message) as refused:
        parse(name)
    assert "\n" not in str(refused.value) and repr(name) in str(refused.value)
    streams = text_files.streams if name.startswith("text:") else image_folder.streams
    with pytest.raises(ValueError):
        streams(name)  # the stream check reads the options the same way


def test_options_given_once_read_as_before(tmp_path):
    source = text_files.parse(f"text:{tmp_path}?text=s&label=l&width=16&stream=1")
    assert (source.text, source.label, source.width) == ("s", "l", 16)
    assert text_files.streams(f"text:{tmp_path}?text=s&label=l&stream=1")
    assert not text_files.streams(f"text:{tmp_path}?text=s&label=l")
