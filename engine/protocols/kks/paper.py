"""``kks`` in the paper style: Wu et al.'s Appendix C prompts (see ``prompts.py``)."""

from __future__ import annotations

from engine.protocols.kks.prompts import CRITICAL_ALL, RULES, SAMPLE, KksPrompts

# The paper asks for its JSON in the prompt and reads free text.
PAPER = KksPrompts(
    ASSIGNMENT_SCHEMA=None,
    ROLE_SCHEMA=None,
    initial_template=(
        "You are participating in a multi-agent debate about a Knight-Knave-Spy game. There are "
        "$n_players other players in the game, each assigned a role of knight, knave, or spy. Each "
        "player will make a statement about themselves and other players. Besides those players, there "
        "is "
        f"also a game manager who will provide you some hints.\n{RULES}\nYour task is to deduce the "
        "role of "
        "each player based on the statements and hints. You will be participating in a debate with other "
        "agents, and you can see the conversation history including your own previous responses and "
        "those "
        "of other agents.\nYour task is to deduce the role of each player, based on the statements and "
        "the "
        'hints. The result should be given in the following json format:\n{\n"players": [\n{"name": '
        '"player_name", "role": '
        '"role"},\n...\n],\n"explanation": "string"\n}\nThe players array contains '
        "objects with name and role strings. Include one entry for each player. Explanation is a string "
        f"that contains the argument to derive the result.$conf\n{SAMPLE}\n{CRITICAL_ALL}\n\nGame "
        "info:\n$game"
    ),
    debate_template=(
        "You are $me participating in a debate about $player's role in this Knight-Knaves-Spy game.\n"
        "GAME INFORMATION:\n$game\nCURRENT FOCUS: We are debating the role of "
        "$player.\n$positions\n$earlier\n"
        "OTHER AVAILABLE AGENTS IN THIS DEBATE: $others\nYour task is to:\n"
        "1. Analyze the other agents positions on $player's role from the conversation history\n"
        "2. Decide which OTHER agents you agree with and which you disagree with (do NOT include "
        "yourself)\n"
        "3. Provide reasoning for your agreements and disagreements\n"
        "4. Make your final decision on $player's role\nCRITICAL REQUIREMENTS:\n"
        '- You MUST assign $player one of the three roles: "knight", "knave", or "spy"\n'
        '- Do NOT use "unknown" or any other value - you must make a definitive choice\n'
        "- Do NOT consider other players roles when making your decision (only consider $player)\n"
        'Return your response in JSON format:\n{\n"player_role": "$player",\n"role": '
        '"knight/knave/spy",\n"agree_with": ["other_agent_name1", '
        '"other_agent_name2"],\n"disagree_with": '
        '["other_agent_name3"],\n"agree_reasoning": "Brief reasoning for '
        'agreements",\n"disagree_reasoning": '
        '"Brief reasoning for disagreements"$conf\n}'
    ),
    role_confidence=',\n"confidence": 1-10',
    adjust_template=(
        "You are $me. Based on the debate about $player's role, please provide your complete solution "
        "for ALL players.\nGAME INFORMATION:\n$game\nCURRENT FOCUS: We just finished debating "
        "$player's "
        "role.\n$analysis\n$solutions\nBased on the debate, please provide your self-adjustment solution "
        "on all "
        "players.\nCRITICAL REQUIREMENTS:\n- In this self-adjustment phase, you must provide a complete "
        'assignment of roles for all players, not just $player.\n- Do not use "unknown" or any '
        'placeholder values - you must make a definitive choice for each player from "knight", '
        '"knave", or '
        '"spy".\nReturn your complete solution in JSON format:\n{\n"players": [\n{"name": "player_name", '
        '"role": "role"},\n{"name": "another_player", "role": "role"},\n...\n],\n"explanation": "Your '
        "reasoning after considering the "
        'debate"\n}$conf\nREMINDER: Include ALL players in the "players" '
        "array, each with their assigned role."
    ),
    final_template=(
        "This is the FINAL DISCUSSION phase. You have access to the complete debate history.\n"
        "GAME INFORMATION:\n$game\n$solutions\nNow make your final decision for ALL players. You can "
        "reference the entire conversation history including your own responses and those of other "
        "agents."
        f"\n{CRITICAL_ALL}\nReturn your solution in JSON format:\n"
        '{\n"players": [\n{"name": "player_name", "role": "role"},\n...\n],\n"explanation": "string"\n}'
    ),
)
