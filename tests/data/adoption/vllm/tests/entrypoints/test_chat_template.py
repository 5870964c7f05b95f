def test_chat_template_renders():
    assert "{{ message }}".startswith("{{")
