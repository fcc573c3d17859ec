"""Writes the small files of reports/formats/data/ in the published layouts (see ../README.md).

Run from the repository root: .venv/bin/python reports/formats/make_data.py
"""
import json, math, re, sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from debate_worker.kks.generator import generate_dataset
from debate_worker.kks.puzzle import game_text
from retriever.corpus import vital_corpus_path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "reports" / "formats" / "data"
WIKI = json.load(open(vital_corpus_path()))
STOP = set("the a an of in on at to for is was were are who what when where which how many did does do by with and or from as it its this that be been has have had last year".split())

def words(t): return [w for w in re.findall(r"[a-z0-9]+", t.lower()) if w not in STOP]

def passages():
    out = []
    for title, v in WIKI.items():
        ws = v["extract"].split()
        for i in range(0, len(ws), 100):
            out.append((title, " ".join(ws[i:i+100])))
    return out

PASSAGES = passages()
DF = Counter(w for _, p in PASSAGES for w in set(words(p)))
N = len(PASSAGES)

def search(q, k=5):
    qw = set(words(q))
    scored = []
    for title, p in PASSAGES:
        tf = Counter(words(title + " " + p))
        s = sum(math.log(N / DF.get(w, 1)) * min(tf[w], 2) for w in qw if tf[w])
        if s: scored.append((s, title, p))
    scored.sort(reverse=True)
    return scored[:k]

def entry(i, s, title, text): return {"id": f"wiki-{i}", "contents": f"{title}\n{text}", "score": round(s, 2)}

# MADKE QA: real NQ-open dev questions, pools from the bundled Wikipedia summaries (no web results offline).
qa = []
for line in open(ROOT.parent / "shared" / "data" / "nq_open_vital_dev.jsonl"):
    r = json.loads(line)
    hits = search(r["question"])
    if any(a.lower() in p.lower() for _, _, p in hits[:3] for a in r["answers"]):
        qa.append({"question": r["question"], "answer": r["answers"],
                   "wiki_retrieval": [entry(i, *h) for i, h in enumerate(hits)], "google_retrieval": []})
    if len(qa) == 2: break
(OUT / "madke_nq_layout.json").write_text(json.dumps(qa, indent=4))

def wiki_pool(*titles):
    return [{"id": f"wiki-{i}", "contents": f"{t}\n{' '.join(WIKI[t]['extract'].split()[:100])}"} for i, t in enumerate(titles)]

fever = [
    {"question": "The Eiffel Tower is located in Rome.", "answer": ["REFUTES"], "wiki_retrieval": wiki_pool("Eiffel Tower", "Paris"), "google_retrieval": []},
    {"question": "Hamlet is a tragedy written by William Shakespeare.", "answer": ["SUPPORTS"], "wiki_retrieval": wiki_pool("Hamlet", "William Shakespeare"), "google_retrieval": []},
]
(OUT / "madke_fever_layout.json").write_text(json.dumps(fever, indent=4))

mmlu = [
    {"question": "Which cells of the pancreas produce insulin?\n(A) Alpha cells\n(B) Beta cells\n(C) Delta cells\n(D) Acinar cells",
     "answer": "(B) Beta cells", "wiki_retrieval": wiki_pool("Insulin", "Pancreas"), "google_retrieval": []},
    {"question": "Which organ pumps blood through the blood vessels?\n(A) Liver\n(B) Lungs\n(C) Heart\n(D) Kidney",
     "answer": "(C) Heart", "wiki_retrieval": wiki_pool("Heart", "Liver"), "google_retrieval": []},
]
(OUT / "madke_mmlu_med_layout.json").write_text(json.dumps(mmlu, indent=4))

ciar = [
    {"question": "Alice walks up a hill at 1 m/s and comes back down the same path at 3 m/s. What is her average speed for the whole walk, in m/s?",
     "answer": ["1.5", "3/2"], "explanation": "Equal distances d: total 2d over d/1 + d/3 = 4d/3, so 1.5 m/s.",
     "incorrect answer": ["2"], "incorrect explanation": "The arithmetic mean of 1 and 3."},
    {"question": "A bat and a ball cost $1.10 in total. The bat costs $1.00 more than the ball. How much does the ball cost, in dollars?",
     "answer": ["0.05", "1/20"], "explanation": "ball + (ball + 1.00) = 1.10, so the ball costs 0.05.",
     "incorrect answer": ["0.10"], "incorrect explanation": "1.10 minus 1.00."},
]
(OUT / "ciar_layout.json").write_text(json.dumps(ciar, indent=4))

codes = {"knight": 1, "knave": 2, "spy": 3}
with open(OUT / "controlmad_kks_3.jsonl", "w") as fh:
    for k, p in enumerate(generate_dataset([3], per_size=2, seed=15), start=1):
        game = game_text(p.players, p.statements) + "\n"
        fh.write(json.dumps({"game_id": k, "num_player": 3, "num_spy": 1, "num_hint": 1,
                             "raw_solution": [codes[p.solution[n]] for n in p.players],
                             "text_game": game,
                             "text_solution": "".join(f"{n} is a {p.solution[n]}.\n" for n in p.players)}) + "\n")
print("ok", [q["question"] for q in qa])
