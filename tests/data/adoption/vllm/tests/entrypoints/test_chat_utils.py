# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
def test_chat_template_renders_a_message():
    assert "{{ message }}".startswith("{{")
