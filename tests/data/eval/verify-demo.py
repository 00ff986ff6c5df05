"""Writes verify-demo.jsonl: the demo pipeline's verify questions with gold answers.

Each case is what examples/demo.yaml's verify stage asks about one proposal for one
situation, rendered as the pipeline renders it (docs/pipelines.md, Templates): the
request's state, and the questions `consistent` and `on_topic` with the proposal's
text in place of {{candidates[decide.choice]}}. Gold answers are ours: each situation
has two proposals that address it (consistent, on topic), one about the same system
that ignores or worsens it (not consistent, on topic) and one about something else
(neither). Run: python3 tests/data/eval/verify-demo.py > tests/data/eval/verify-demo.jsonl
"""
import json

SITUATIONS = [
    ("The build server is at 97% memory and swapping. Eight compile jobs run in parallel.",
     "Reduce build concurrency from eight jobs to four.",
     "Stop the non-critical documentation builds.",
     "Start eight more compile jobs to finish sooner.",
     "Renew the company's domain name registration."),
    ("The database disk is 98% full and writes are starting to fail.",
     "Delete old write-ahead log archives that are already backed up.",
     "Move the database to the larger spare volume.",
     "Turn on verbose query logging on the same disk.",
     "Repaint the meeting room on the second floor."),
    ("The web site's TLS certificate expires tomorrow morning.",
     "Renew the certificate today and deploy it to the load balancer.",
     "Request a new certificate from the certificate authority now.",
     "Wait until it expires and see whether anyone complains.",
     "Order more coffee for the kitchen."),
    ("A customer was charged twice for the same invoice and asks for a refund.",
     "Refund the duplicate charge and confirm by email.",
     "Ask billing to reverse the second payment.",
     "Charge the customer a third time to be safe.",
     "Upgrade the office printers' firmware."),
    ("The nightly backup job has failed three nights in a row.",
     "Investigate the backup logs and rerun the job manually.",
     "Check the backup target's free space and credentials.",
     "Disable the backup job so it stops sending alerts.",
     "Plan the summer team outing."),
    ("The API's error rate jumped to 20% right after the last deployment.",
     "Roll back the last deployment.",
     "Route traffic to the previous release while the team investigates.",
     "Deploy two more unreviewed changes on top.",
     "Translate the marketing brochure into Spanish."),
    ("A laptop with unencrypted customer data was stolen from a car.",
     "Report the incident to the security team and revoke the laptop's credentials.",
     "Notify the affected customers as the data-breach policy requires.",
     "Keep the theft quiet and buy a replacement laptop.",
     "Reorganise the shared drive's folder names."),
    ("The support queue has 400 open tickets and response times are three days.",
     "Bring in two extra agents from another team for a week.",
     "Triage the queue and answer the urgent tickets first.",
     "Close every ticket older than a day without answering.",
     "Switch the company logo to a darker blue."),
    ("The production Kubernetes cluster's nodes are at 95% CPU during peak hours.",
     "Add two nodes to the cluster's autoscaling group.",
     "Scale the busiest deployment horizontally before the next peak.",
     "Double the CPU requests of every pod without adding nodes.",
     "Update the employee handbook's holiday section."),
    ("The office Wi-Fi drops every few minutes in the east wing.",
     "Replace the failing access point in the east wing.",
     "Check the east wing access point's logs and firmware.",
     "Turn off the remaining access points to save power.",
     "Migrate the accounting software to a new vendor."),
    ("A phishing email asking for passwords reached 200 employees this morning.",
     "Block the sender and remove the email from every mailbox.",
     "Warn employees not to click the link and reset any exposed passwords.",
     "Forward the email to everyone so they can see what it looks like and click it.",
     "Renegotiate the cleaning contract."),
    ("The mobile app crashes on start for every user of the newest phone model.",
     "Ship a hotfix for the crash on that phone model.",
     "Reproduce the crash on the new phone and find the faulty call.",
     "Remove the app from the store until next year.",
     "Buy new chairs for the design team."),
    ("The warehouse ran out of the best-selling product two days before a sale.",
     "Place an express order with the supplier.",
     "Move stock from the other warehouse before the sale.",
     "Advertise the sale of that product even more.",
     "Rewrite the company's privacy policy."),
    ("A key engineer resigned and is the only one who knows the billing system.",
     "Schedule knowledge-transfer sessions before the engineer leaves.",
     "Have the engineer document the billing system's operations.",
     "Let the engineer leave without any handover.",
     "Change the brand colour of the website footer."),
    ("The DNS provider is down and the company web site cannot be resolved.",
     "Switch the domain to the secondary DNS provider.",
     "Lower the records' TTL and add a backup name server.",
     "Delete the domain's DNS records.",
     "Order new business cards."),
    ("Monthly cloud costs doubled because of unused test machines.",
     "Shut down the unused test machines.",
     "Set a budget alert and an automatic stop for idle machines.",
     "Start more test machines of the largest size.",
     "Organise a hackathon on mobile games."),
    ("The on-call engineer was paged 40 times last night by a flapping disk alert.",
     "Fix the alert's threshold so it stops flapping.",
     "Add a delay so the alert fires only when the condition persists.",
     "Page the engineer every minute instead.",
     "Replace the kitchen's refrigerator."),
    ("The CI pipeline takes 90 minutes and developers wait for it all day.",
     "Run the test suites in parallel on more runners.",
     "Cache dependencies between CI runs.",
     "Add a 30-minute sleep to every CI job.",
     "Rename the sales regions."),
    ("A memory leak makes the payment service restart every six hours.",
     "Profile the payment service and fix the leak.",
     "Restart the service on a schedule until the leak is fixed.",
     "Double the leak by caching every request forever.",
     "Choose a new font for the internal wiki."),
    ("A supplier's shipment of components arrived 30% short.",
     "Ask the supplier to ship the missing components.",
     "Record the shortfall and withhold payment for the missing part.",
     "Pay the invoice in full and say nothing.",
     "Update the staff's parking permits."),
]

CONSISTENT = ("The operator proposes: {p}. "
              "Is this proposal consistent with the situation described?")
ON_TOPIC = ('Does the proposal "{p}" talk about the same system as the situation?')


def case(n, k, state, proposal, consistent, on_topic):
    return {
        "id": f"s{n:02d}-{k}",
        "state": state,
        "questions": {
            "consistent": {
                "type": "noul",
                "instructions": CONSISTENT.format(p=proposal),
                "criteria": {"true": "the proposal addresses the situation",
                             "false": "the proposal ignores or worsens the situation"}},
            "on_topic": {"type": "noul", "instructions": ON_TOPIC.format(p=proposal),
                         "criteria": None}},
        "gold": {"consistent": consistent, "on_topic": on_topic},
    }


for n, (state, good1, good2, bad, off) in enumerate(SITUATIONS, 1):
    for k, (p, c, t) in enumerate([(good1, True, True), (good2, True, True),
                                   (bad, False, True), (off, False, False)], 1):
        print(json.dumps(case(n, k, state, p, c, t)))
